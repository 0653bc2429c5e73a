-- Reading posts (functions/README.md "Functions"): timeline, mapPosts, searchPosts, myPosts. Posts are read
-- with the caller's permissions, so Post's afterFind (posts.lua) adds authorUsername /
-- authorAvatar and strips hidden fields for non-authors, exactly as for REST reads.

local app = require("lib.app")
local fail, ptr, present, intParam, isGeoPoint, dateAt, asList = app.fail, app.ptr, app.present, app.intParam, app.isGeoPoint, app.dateAt, app.asList

local CATEGORIES = {Coffee = true, Food = true, Drinks = true, Sights = true, Arts = true}
local MAX_LIMIT = 1000
local MAX_RADIUS_MILES = 12500

local function nowDate() return dateAt(time.now()) end

local function geoParam(params, name, required)
  local v = params[name]
  if not present(v) then
    if required then fail(cloud.codes.VALIDATION_ERROR, name .. " is required (a GeoPoint)") end
    return nil
  end
  if not isGeoPoint(v) then
    fail(cloud.codes.VALIDATION_ERROR, name .. " must be a GeoPoint {__type: \"GeoPoint\", latitude: -90..90, longitude: -180..180}")
  end
  return {__type = "GeoPoint", latitude = v.latitude, longitude = v.longitude}
end

local function radiusParam(params)
  local v = params.radiusMiles
  if not present(v) then return 5 end
  if type(v) ~= "number" or v ~= v or v <= 0 or v > MAX_RADIUS_MILES then
    fail(cloud.codes.VALIDATION_ERROR, "radiusMiles must be a number above 0 and at most " .. MAX_RADIUS_MILES)
  end
  return v
end

-- Adds the optional category filter to `where`.
local function categoryParam(params, where)
  local c = params.category
  if not present(c) then return end
  if not CATEGORIES[c] then fail(cloud.codes.VALIDATION_ERROR, "category must be one of Coffee, Food, Drinks, Sights, Arts") end
  where.category = c
end

-- timeline {location, sort: newest | trending, radiusMiles = 5, category?, limit = 20, skip = 0}
cloud.define("timeline", {requireUser = true}, function(req)
  local params = req.params or {}
  local location = geoParam(params, "location", true)
  local sort = params.sort
  if not present(sort) then sort = "newest" end
  if sort ~= "newest" and sort ~= "trending" then fail(cloud.codes.VALIDATION_ERROR, "sort must be newest or trending") end
  local where = {
    location = {["$nearSphere"] = location, ["$maxDistanceInMiles"] = radiusParam(params)},
    expiresAt = {["$gt"] = nowDate()},
  }
  categoryParam(params, where)
  local order = sort == "newest" and "-createdAt" or "-likesCount,-createdAt"
  return asList(db.find("Post", where, {order = order, limit = intParam(params, "limit", 20, 1, MAX_LIMIT),
    skip = intParam(params, "skip", 0, 0, 100000)}))
end)

-- mapPosts {southwest, northeast, category?, limit = 100}: unexpired posts in the box, newest first.
cloud.define("mapPosts", {requireUser = true}, function(req)
  local params = req.params or {}
  local sw, ne = geoParam(params, "southwest", true), geoParam(params, "northeast", true)
  if sw.latitude > ne.latitude then fail(cloud.codes.VALIDATION_ERROR, "southwest must be south of northeast") end
  local where = {
    location = {["$within"] = {["$box"] = {sw, ne}}},
    expiresAt = {["$gt"] = nowDate()},
  }
  categoryParam(params, where)
  return asList(db.find("Post", where, {order = "-createdAt", limit = intParam(params, "limit", 100, 1, MAX_LIMIT)}))
end)

-- searchPosts {term, location?, radiusMiles = 5, limit = 20}: full text, every word (prefix,
-- case-insensitive); with a location, within the radius and nearest first, else newest first.
cloud.define("searchPosts", {requireUser = true}, function(req)
  local params = req.params or {}
  local term = params.term
  if type(term) ~= "string" or not term:find("[%w\128-\255]") then
    fail(cloud.codes.VALIDATION_ERROR, "term is required and must hold at least one word")
  end
  if #term > 200 then fail(cloud.codes.VALIDATION_ERROR, "term must be at most 200 bytes") end
  local where = {
    text = {["$text"] = {["$search"] = {["$term"] = term}}},
    expiresAt = {["$gt"] = nowDate()},
  }
  local opts = {limit = intParam(params, "limit", 20, 1, MAX_LIMIT)}
  local location = geoParam(params, "location", false)
  if location then
    where.location = {["$nearSphere"] = location, ["$maxDistanceInMiles"] = radiusParam(params)}
  else
    opts.order = "-createdAt"
  end
  categoryParam(params, where)
  return asList(db.find("Post", where, opts))
end)

-- myPosts {limit = 20, skip = 0}: the caller's posts, newest first, expired included.
cloud.define("myPosts", {requireUser = true}, function(req)
  local params = req.params or {}
  return asList(db.find("Post", {author = ptr("_User", req.user.objectId)}, {order = "-createdAt",
    limit = intParam(params, "limit", 20, 1, MAX_LIMIT), skip = intParam(params, "skip", 0, 0, 100000)}))
end)
