-- Small helpers shared by the pals files: errors, parameter checks, pointers, dates and distances.
local M = {}

function M.fail(code, message) error(cloud.error(code, message), 0) end
function M.present(v) return v ~= nil and v ~= json.null end
function M.ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end
function M.user(id) return M.ptr("_User", id) end
function M.list(t) if #t == 0 then return json.array() end return t end
function M.idOf(p) return type(p) == "table" and p.objectId or nil end

function M.isGeoPoint(v)
  return type(v) == "table" and v.__type == "GeoPoint" and type(v.latitude) == "number" and type(v.longitude) == "number"
     and v.latitude >= -90 and v.latitude <= 90 and v.longitude >= -180 and v.longitude <= 180
end

function M.geoParam(params, name)
  local v = params[name]
  if not M.isGeoPoint(v) then M.fail(cloud.codes.VALIDATION_ERROR, name .. " is required (a GeoPoint)") end
  return {__type = "GeoPoint", latitude = v.latitude, longitude = v.longitude}
end

-- A string of 1..max characters that is not only whitespace.
function M.textParam(params, name, max)
  local v = params[name]
  if type(v) ~= "string" then M.fail(cloud.codes.VALIDATION_ERROR, name .. " is required (a string)") end
  local n = utf8.len(v)
  if not n then M.fail(cloud.codes.VALIDATION_ERROR, name .. " must be valid UTF-8") end
  if not v:find("%S") then M.fail(cloud.codes.VALIDATION_ERROR, name .. " must not be empty") end
  if n > max then M.fail(cloud.codes.VALIDATION_ERROR, name .. " must be at most " .. max .. " characters") end
  return v
end

function M.idParam(params, name)
  local v = params[name]
  if type(v) ~= "string" or v == "" or #v > 64 then M.fail(cloud.codes.VALIDATION_ERROR, name .. " is required (an id)") end
  return v
end

function M.intParam(params, name, default, lo, hi)
  local v = params[name]
  if not M.present(v) then
    if default == nil then M.fail(cloud.codes.VALIDATION_ERROR, name .. " is required") end
    return default
  end
  local n = math.type(v) == "integer" and v or (type(v) == "number" and v == math.floor(v) and math.tointeger(v))
  if not n or n < lo or n > hi then M.fail(cloud.codes.VALIDATION_ERROR, name .. " must be a whole number from " .. lo .. " to " .. hi) end
  return n
end

------------------------------------------------------------------------ time

-- Milliseconds of one "minute" for journeys (ETAs and the stuck timer). A deployment leaves it
-- at 60,000; the Config parameter `palsMinuteMs` shortens it so tests need not wait ten minutes.
function M.minuteMs()
  local v = tonumber(config.get("palsMinuteMs"))
  if v and v >= 1 then return math.floor(v) end
  return 60000
end

function M.date(ms)
  return {__type = "Date", iso = os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. string.format(".%03dZ", ms % 1000)}
end

-- Days since 1970-01-01 of a proleptic Gregorian date (no dependency on the server's time zone).
local function daysFromCivil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = (153 * mp + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

-- Milliseconds of a Date value or an ISO 8601 UTC string; nil when it is neither.
function M.millis(v)
  local iso = type(v) == "table" and v.__type == "Date" and v.iso or v
  if type(iso) ~= "string" then return nil end
  local y, mo, d, h, mi, s, frac = iso:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)%.?(%d*)Z$")
  if not y then return nil end
  local ms = tonumber((frac .. "000"):sub(1, 3))
  return ((daysFromCivil(tonumber(y), tonumber(mo), tonumber(d)) * 24 + tonumber(h)) * 60 + tonumber(mi)) * 60000
         + tonumber(s) * 1000 + ms
end

------------------------------------------------------------------------ geo

-- Great-circle distance in metres.
function M.metres(a, b)
  local r = math.pi / 180
  local dlat, dlng = (b.latitude - a.latitude) * r, (b.longitude - a.longitude) * r
  local h = math.sin(dlat / 2) ^ 2 + math.cos(a.latitude * r) * math.cos(b.latitude * r) * math.sin(dlng / 2) ^ 2
  return 2 * 6371008.8 * math.asin(math.min(1, math.sqrt(h)))
end

return M
