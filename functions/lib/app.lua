-- Helpers shared by the app's files, as a module: each file takes what it uses with
--   local app = require("lib.app")
--   local fail, ptr = app.fail, app.ptr
-- A module is loaded once per VM and its table is shared by every file that requires it, so it
-- holds functions only (no per-request state). Keep only small, app-wide helpers here; a file's
-- own helpers stay `local` in that file.

-- Raises a Parse error {code, message}; level 0: the message carries no file:line.
local function fail(code, message) error(cloud.error(code, message), 0) end

local function ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end

-- True for a value that is set: neither absent nor JSON null.
local function present(v) return v ~= nil and v ~= json.null end

-- The id of a pointer to `className`; nil for anything else.
local function pointerId(v, className)
  if type(v) == "table" and v.__type == "Pointer" and v.className == className and type(v.objectId) == "string" then
    return v.objectId
  end
  return nil
end

-- A finite whole number as a Lua integer; nil for anything else (NaN, infinities, fractions).
local function integral(v)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge or v ~= math.floor(v) then return nil end
  return math.tointeger(v)
end

-- An optional whole-number parameter within [lo, hi]; `default` when absent or null.
local function intParam(params, name, default, lo, hi)
  local v = params[name]
  if not present(v) then return default end
  local n = integral(v)
  if not n or n < lo or n > hi then fail(cloud.codes.VALIDATION_ERROR, name .. " must be a whole number from " .. lo .. " to " .. hi) end
  return n
end

-- A GeoPoint {__type = "GeoPoint", latitude, longitude} with numbers no further than -90..90
-- and -180..180 (written as the negation of the out-of-range tests, so NaN is not refused here).
local function isGeoPoint(v)
  return not (type(v) ~= "table" or v.__type ~= "GeoPoint" or type(v.latitude) ~= "number" or type(v.longitude) ~= "number"
     or v.latitude < -90 or v.latitude > 90 or v.longitude < -180 or v.longitude > 180)
end

-- The Date of `ms` milliseconds since the epoch, UTC, millisecond precision.
local function dateAt(ms)
  return {__type = "Date", iso = os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. string.format(".%03dZ", ms % 1000)}
end

-- The text of a post or comment: a string of 1 to 500 UTF-8 characters, not only whitespace.
local function checkText(text)
  if type(text) ~= "string" then fail(cloud.codes.VALIDATION_ERROR, "text is required and must be a string") end
  local n = utf8.len(text)
  if not n then fail(cloud.codes.VALIDATION_ERROR, "text must be valid UTF-8") end
  if not text:find("%S") then fail(cloud.codes.VALIDATION_ERROR, "text must not be empty") end
  if n > 500 then fail(cloud.codes.VALIDATION_ERROR, "text must be at most 500 characters (got " .. n .. ")") end
end

local function increment(n) return {__op = "Increment", amount = n} end

-- Applies `changes` (increments) to a post with the master key; a post already gone has nothing
-- to fix.
local function bumpPost(postId, changes)
  if db.get("Post", postId, {keys = "objectId", master = true}) then
    db.update("Post", postId, changes, {master = true})
  end
end

-- A list result that stays a JSON array when empty (an empty table encodes as {}).
local function asList(list)
  if #list == 0 then return json.array() end
  return list
end

-- Deletes a stored file if `file` is set; a file already gone is not worth failing over, so a
-- failure is only logged as "<what> not deleted: <error>".
local function deleteFileQuietly(file, what)
  if not present(file) then return end
  local ok, err = pcall(files.delete, file)
  if not ok then log.warn(what .. " not deleted: " .. tostring(err)) end
end

return {
  fail = fail,
  ptr = ptr,
  present = present,
  pointerId = pointerId,
  integral = integral,
  intParam = intParam,
  isGeoPoint = isGeoPoint,
  dateAt = dateAt,
  checkText = checkText,
  increment = increment,
  bumpPost = bumpPost,
  asList = asList,
  deleteFileQuietly = deleteFileQuietly,
}
