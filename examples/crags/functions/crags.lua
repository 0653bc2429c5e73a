-- Crags and route reviews with photos: climbers log the routes they tried at a crag (date,
-- difficulty, style, sent or not, project or not, a photo and its thumbnail), often offline,
-- and upload them later. Everything here is Lua over the generic REST API.

local DIFFICULTIES = {"easy", "moderate", "hard", "unknown"}
local STYLES = {"free", "handFoot", "noFeet", "unknown"}
local ORIENTATIONS = {"up", "down", "left", "right", "none"}
local MAX_UPLOAD = 50
local MAX_PAGE = 200

------------------------------------------------------------------------ helpers

local function fail(code, message) error(cloud.error(code, message), 0) end
local function present(v) return v ~= nil and v ~= json.null end
local function ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end
local function asList(list) if #list == 0 then return json.array() end return list end
local function idOf(p) return type(p) == "table" and p.objectId or nil end

local function oneOf(list)
  local set = {}
  for _, v in ipairs(list) do set[v] = true end
  return set
end
local DIFFICULTY, STYLE, ORIENTATION = oneOf(DIFFICULTIES), oneOf(STYLES), oneOf(ORIENTATIONS)

local function isGeoPoint(v)
  return type(v) == "table" and v.__type == "GeoPoint" and type(v.latitude) == "number" and type(v.longitude) == "number"
     and v.latitude >= -90 and v.latitude <= 90 and v.longitude >= -180 and v.longitude <= 180
end

local function isFile(v) return type(v) == "table" and v.__type == "File" and type(v.name) == "string" end
local function isDate(v) return type(v) == "table" and v.__type == "Date" and type(v.iso) == "string" end

-- A string of 1..max UTF-8 characters that is not only whitespace.
local function checkString(v, name, max, optional)
  if not present(v) then
    if optional then return end
    fail(cloud.codes.VALIDATION_ERROR, name .. " is required")
  end
  if type(v) ~= "string" then fail(cloud.codes.VALIDATION_ERROR, name .. " must be a string") end
  local n = utf8.len(v)
  if not n then fail(cloud.codes.VALIDATION_ERROR, name .. " must be valid UTF-8") end
  if not v:find("%S") then fail(cloud.codes.VALIDATION_ERROR, name .. " must not be empty") end
  if n > max then fail(cloud.codes.VALIDATION_ERROR, name .. " must be at most " .. max .. " characters") end
end

local function intParam(params, name, default, lo, hi)
  local v = params[name]
  if not present(v) then return default end
  local n = math.type(v) == "integer" and v or (type(v) == "number" and v == math.floor(v) and math.tointeger(v))
  if not n or n < lo or n > hi then fail(cloud.codes.VALIDATION_ERROR, name .. " must be a whole number from " .. lo .. " to " .. hi) end
  return n
end

local function numberParam(params, name, default, lo, hi)
  local v = params[name]
  if not present(v) then return default end
  if type(v) ~= "number" or v ~= v or v < lo or v > hi then fail(cloud.codes.VALIDATION_ERROR, name .. " must be a number from " .. lo .. " to " .. hi) end
  return v
end

local function stringParam(params, name)
  local v = params[name]
  if type(v) ~= "string" or v == "" then fail(cloud.codes.VALIDATION_ERROR, name .. " is required (a string)") end
  return v
end

-- The crag with this id, read as the caller (101 when it does not exist).
local function cragOr101(cragId)
  local c = db.get("Crag", cragId)
  if not c then fail(cloud.codes.OBJECT_NOT_FOUND, "no crag " .. cragId) end
  return c
end

-- A file already gone is not worth failing a delete over: logged, not raised.
local function deleteFileQuietly(file, what)
  if not isFile(file) then return end
  local ok, err = pcall(files.delete, file)
  if not ok then log.warn(what .. " not deleted: " .. tostring(err)) end
end

------------------------------------------------------------------------ declarations

cloud.index("Crag", {"name"})
cloud.index("Review", {"crag", "climbedAt"})
cloud.index("Review", {"author", "climbedAt"})
-- One review per device id and author: what makes uploads idempotent, even when two retries race.
cloud.index("Review", {"author", "clientId"}, {unique = true})
cloud.index("Profile", {"user"}, {unique = true})

-- Crags are added by signed-in climbers and curated with the master key; reviews are written by
-- signed-in users (ACLs make them public read, author write); profiles only through setDefaultCrag.
cloud.classPermissions("Crag", {create = {requiresAuthentication = true}, update = {}, delete = {}})
cloud.classPermissions("Review", {create = {requiresAuthentication = true}})
cloud.classPermissions("Profile", {create = {}, update = {}, delete = {}})

------------------------------------------------------------------------ Crag

cloud.beforeSave("Crag", function(req)
  local o = req.object
  checkString(o.name, "name", 100)
  checkString(o.address, "address", 300, true)
  if not isGeoPoint(o.location) then fail(cloud.codes.VALIDATION_ERROR, "location is required (a GeoPoint)") end
  if present(o.avatar) and not isFile(o.avatar) then fail(cloud.codes.VALIDATION_ERROR, "avatar must be a File") end
  if req.original == nil then
    o.reviewsCount = 0
  elseif not req.master and o.reviewsCount ~= req.original.reviewsCount then
    fail(cloud.codes.VALIDATION_ERROR, "reviewsCount is maintained by the server")
  end
end)

-- Deleting a crag (master) deletes its reviews one by one, so each review's files go too, and
-- clears it from the profiles that chose it; all in the deleting transaction.
cloud.beforeDelete("Crag", function(req)
  local crag = ptr("Crag", req.object.objectId)
  db.deleteWhere("Review", {crag = crag}, {master = true})
  db.updateWhere("Profile", {defaultCrag = crag}, {defaultCrag = {__op = "Delete"}}, {master = true, triggers = false})
end)

cloud.afterDelete("Crag", function(req)
  deleteFileQuietly(req.object.avatar, "avatar of crag " .. tostring(req.object.objectId))
end)

------------------------------------------------------------------------ Review

local function checkReview(o)
  if not (type(o.crag) == "table" and o.crag.__type == "Pointer" and o.crag.className == "Crag") then
    fail(cloud.codes.VALIDATION_ERROR, "crag is required (a Pointer to Crag)")
  end
  if not isDate(o.climbedAt) then fail(cloud.codes.VALIDATION_ERROR, "climbedAt is required (a Date)") end
  if not DIFFICULTY[o.difficulty] then fail(cloud.codes.VALIDATION_ERROR, "difficulty must be one of " .. table.concat(DIFFICULTIES, ", ")) end
  if not STYLE[o.style] then fail(cloud.codes.VALIDATION_ERROR, "style must be one of " .. table.concat(STYLES, ", ")) end
  if type(o.sent) ~= "boolean" then fail(cloud.codes.VALIDATION_ERROR, "sent is required (true or false)") end
  if type(o.project) ~= "boolean" then fail(cloud.codes.VALIDATION_ERROR, "project is required (true or false)") end
  if present(o.orientation) and not ORIENTATION[o.orientation] then
    fail(cloud.codes.VALIDATION_ERROR, "orientation must be one of " .. table.concat(ORIENTATIONS, ", "))
  end
  if present(o.image) and not isFile(o.image) then fail(cloud.codes.VALIDATION_ERROR, "image must be a File") end
  if present(o.thumbnail) and not isFile(o.thumbnail) then fail(cloud.codes.VALIDATION_ERROR, "thumbnail must be a File") end
  checkString(o.clientId, "clientId", 100)
end

cloud.beforeSave("Review", function(req)
  local o, old = req.object, req.original
  if old == nil then
    if not req.master then
      if not req.user then fail(cloud.codes.VALIDATION_ERROR, "login required") end
      o.author = ptr("_User", req.user.objectId)        -- server-set, whatever the client sent
    elseif not present(o.author) then
      fail(cloud.codes.VALIDATION_ERROR, "author is required when creating a review with the master key")
    end
    if not present(o.orientation) then o.orientation = "none" end
    checkReview(o)
    if not db.get("Crag", o.crag.objectId, {keys = "objectId", master = true}) then fail(cloud.codes.OBJECT_NOT_FOUND, "no crag " .. o.crag.objectId) end
    db.update("Crag", o.crag.objectId, {reviewsCount = {__op = "Increment", amount = 1}}, {master = true})
  else
    checkReview(o)
    if idOf(o.crag) ~= idOf(old.crag) then fail(cloud.codes.VALIDATION_ERROR, "a review cannot move to another crag") end
    if idOf(o.author) ~= idOf(old.author) then fail(cloud.codes.VALIDATION_ERROR, "author is set by the server") end
    if o.clientId ~= old.clientId then fail(cloud.codes.VALIDATION_ERROR, "clientId cannot change") end
  end
end)

cloud.beforeDelete("Review", function(req)
  local cragId = idOf(req.object.crag)
  if cragId and db.get("Crag", cragId, {keys = "objectId", master = true}) then
    db.update("Crag", cragId, {reviewsCount = {__op = "Increment", amount = -1}}, {master = true})
  end
end)

-- Files go after commit: a rolled-back delete keeps them.
cloud.afterDelete("Review", function(req)
  deleteFileQuietly(req.object.image, "image of review " .. tostring(req.object.objectId))
  deleteFileQuietly(req.object.thumbnail, "thumbnail of review " .. tostring(req.object.objectId))
end)

------------------------------------------------------------------------ accounts

-- Deleting an account (the user's own session, or the master key) takes the user's reviews (and
-- with them their files and the crags' counts) and profile, in the deleting transaction.
cloud.beforeDelete("_User", function(req)
  local me = ptr("_User", req.object.objectId)
  db.deleteWhere("Review", {author = me}, {master = true})
  db.deleteWhere("Profile", {user = me}, {master = true, triggers = false})
end)

------------------------------------------------------------------------ functions

-- nearbyCrags {location, radiusKm = 25, limit = 50}: crags nearest first, with their review counts.
cloud.define("nearbyCrags", {requireUser = true}, function(req)
  local p = req.params or {}
  if not isGeoPoint(p.location) then fail(cloud.codes.VALIDATION_ERROR, "location is required (a GeoPoint)") end
  local radius = numberParam(p, "radiusKm", 25, 0.001, 20000)
  local where = {location = {["$nearSphere"] = {__type = "GeoPoint", latitude = p.location.latitude, longitude = p.location.longitude},
                             ["$maxDistanceInKilometers"] = radius}}
  return asList(db.find("Crag", where, {limit = intParam(p, "limit", 50, 1, MAX_PAGE)}))
end)

-- cragReviews {cragId, limit = 20, skip = 0}: newest climbs first.
cloud.define("cragReviews", {requireUser = true}, function(req)
  local p = req.params or {}
  local crag = cragOr101(stringParam(p, "cragId"))
  return asList(db.find("Review", {crag = ptr("Crag", crag.objectId)}, {order = "-climbedAt,-createdAt",
    limit = intParam(p, "limit", 20, 1, MAX_PAGE), skip = intParam(p, "skip", 0, 0, 100000), include = "crag"}))
end)

-- myTimeline {limit = 20, skip = 0}: the caller's reviews, newest climbs first.
cloud.define("myTimeline", {requireUser = true}, function(req)
  local p = req.params or {}
  return asList(db.find("Review", {author = ptr("_User", req.user.objectId)}, {order = "-climbedAt,-createdAt",
    limit = intParam(p, "limit", 20, 1, MAX_PAGE), skip = intParam(p, "skip", 0, 0, 100000), include = "crag"}))
end)

-- myProjects {limit = 50}: the caller's reviews marked as a project, newest first.
cloud.define("myProjects", {requireUser = true}, function(req)
  local p = req.params or {}
  return asList(db.find("Review", {author = ptr("_User", req.user.objectId), project = true},
    {order = "-climbedAt,-createdAt", limit = intParam(p, "limit", 50, 1, MAX_PAGE), include = "crag"}))
end)

-- cragStats {cragId} -> {reviews, byDifficulty, byStyle, sentPercent (0-100, one decimal)}.
cloud.define("cragStats", {requireUser = true}, function(req)
  local crag = cragOr101(stringParam(req.params or {}, "cragId"))
  local where = {crag = ptr("Crag", crag.objectId)}
  local total = db.count("Review", where)
  local function countBy(field, values)
    local out = {}
    for _, v in ipairs(values) do out[v] = db.count("Review", {crag = where.crag, [field] = v}) end
    return out
  end
  local sent = db.count("Review", {crag = where.crag, sent = true})
  local pct = total == 0 and 0 or math.floor(sent * 1000 / total + 0.5) / 10
  return {reviews = total, byDifficulty = countBy("difficulty", DIFFICULTIES), byStyle = countBy("style", STYLES),
          sentPercent = pct}
end)

-- uploadReviews {reviews: [...]} -> {results = {[clientId] = objectId}}. Idempotent by clientId:
-- a review the caller already uploaded is not created again, so a retry after a lost answer
-- creates nothing twice. All or nothing: one invalid review fails the upload and creates none.
cloud.define("uploadReviews", {requireUser = true, maxDbOps = 2000}, function(req)
  local list = (req.params or {}).reviews
  if type(list) ~= "table" or #list == 0 then fail(cloud.codes.VALIDATION_ERROR, "reviews must be a non-empty array") end
  if #list > MAX_UPLOAD then fail(cloud.codes.VALIDATION_ERROR, "at most " .. MAX_UPLOAD .. " reviews per upload") end
  local me = ptr("_User", req.user.objectId)
  local results, seen = {}, {}
  db.transaction(function()
    for i, r in ipairs(list) do
      if type(r) ~= "table" then fail(cloud.codes.VALIDATION_ERROR, "reviews[" .. i .. "] must be an object") end
      checkString(r.clientId, "reviews[" .. i .. "].clientId", 100)
      if seen[r.clientId] then fail(cloud.codes.VALIDATION_ERROR, "clientId " .. r.clientId .. " appears twice in this upload") end
      seen[r.clientId] = true
      local existing = db.first("Review", {author = me, clientId = r.clientId}, {keys = "objectId", master = true})
      if existing then
        results[r.clientId] = existing.objectId
      else
        local fields = {}
        for _, k in ipairs({"crag", "climbedAt", "difficulty", "style", "sent", "project", "image", "thumbnail",
                            "orientation", "clientId"}) do fields[k] = r[k] end
        if type(r.cragId) == "string" and not present(fields.crag) then fields.crag = ptr("Crag", r.cragId) end
        local ok, created = pcall(db.create, "Review", fields)
        if not ok then
          local code = type(created) == "table" and created.code
          if code == cloud.codes.DUPLICATE_VALUE then
            -- The same upload racing on another connection won: answer with its review.
            results[r.clientId] = db.first("Review", {author = me, clientId = r.clientId}, {keys = "objectId", master = true}).objectId
          else
            local msg = type(created) == "table" and created.message or tostring(created)
            fail(code or cloud.codes.SCRIPT_FAILED, "review " .. r.clientId .. ": " .. msg)
          end
        else
          results[r.clientId] = created.objectId
        end
      end
    end
  end)
  return {results = results}
end)

-- setDefaultCrag {cragId} -> the caller's profile.
cloud.define("setDefaultCrag", {requireUser = true}, function(req)
  local crag = cragOr101(stringParam(req.params or {}, "cragId"))
  local me = ptr("_User", req.user.objectId)
  local profile = db.first("Profile", {user = me}, {master = true})
  local acl = {[req.user.objectId] = {read = true, write = true}}
  if profile then
    return db.update("Profile", profile.objectId, {defaultCrag = ptr("Crag", crag.objectId)}, {master = true})
  end
  return db.create("Profile", {user = me, defaultCrag = ptr("Crag", crag.objectId), ACL = acl}, {master = true})
end)

-- myProfile -> the caller's profile with its default crag, or {} when none was chosen.
cloud.define("myProfile", {requireUser = true}, function(req)
  return db.first("Profile", {user = ptr("_User", req.user.objectId)}, {include = "defaultCrag"}) or {}
end)
