-- Post triggers (functions/README.md "Classes", "Validation and authority", "Cascades"):
--   beforeSave  validates, sets the server-owned fields on create, refuses non-master updates of
--               counters / author / location / validityMinutes / expiresAt;
--   afterFind   adds authorUsername / authorAvatar and strips hidden fields for non-authors
--               (REST reads and the functions' db.* reads as the caller both pass here);
--   beforeDelete deletes the post's comments, reactions and views inside the deleting transaction;
--   afterDelete removes the photo file once the delete has committed.

local app = require("lib.app")
local fail, ptr, present, integral, isGeoPoint, dateAt, checkText, deleteFileQuietly = app.fail, app.ptr, app.present, app.integral, app.isGeoPoint, app.dateAt, app.checkText, app.deleteFileQuietly

local CATEGORIES = {Coffee = true, Food = true, Drinks = true, Sights = true, Arts = true}
local COUNTERS = {"likesCount", "dislikesCount", "commentsCount", "viewsCount"}
local FLAGS = {"hideLocation", "hideUsername", "hideProfilePic"}
local LOCKED = {"likesCount", "dislikesCount", "commentsCount", "viewsCount",
                "author", "location", "validityMinutes", "expiresAt"}
local MAX_VALIDITY = 10080

-- Deep equality of two decoded JSON values (pointers compare by class and id).
local function same(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  if a.__type == "Pointer" or b.__type == "Pointer" then
    return a.objectId == b.objectId and a.className == b.className
  end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local function checkGeoPoint(v, name)
  if not isGeoPoint(v) then
    fail(cloud.codes.VALIDATION_ERROR, name .. " is required and must be a GeoPoint (latitude -90..90, longitude -180..180)")
  end
end

-- Checks shared by create and update: text, category, photo and the hide flags.
local function checkEditable(o)
  checkText(o.text)
  if present(o.category) and not CATEGORIES[o.category] then
    fail(cloud.codes.VALIDATION_ERROR, "category must be one of Coffee, Food, Drinks, Sights, Arts")
  end
  if present(o.photo) and (type(o.photo) ~= "table" or o.photo.__type ~= "File") then
    fail(cloud.codes.VALIDATION_ERROR, "photo must be a File")
  end
  for _, f in ipairs(FLAGS) do
    if o[f] ~= nil and type(o[f]) ~= "boolean" then fail(cloud.codes.VALIDATION_ERROR, f .. " must be a boolean") end
  end
end

local function onCreate(req, o)
  if req.master then
    if type(o.author) ~= "table" or o.author.className ~= "_User" or type(o.author.objectId) ~= "string" then
      fail(cloud.codes.VALIDATION_ERROR, "author (a _User pointer) is required when the master key creates a post")
    end
  else
    if not req.user then fail(cloud.codes.VALIDATION_ERROR, "login required") end
    o.author = ptr("_User", req.user.objectId)
  end
  checkEditable(o)
  checkGeoPoint(o.location, "location")
  local keepExpiry = req.master and type(o.expiresAt) == "table" and o.expiresAt.__type == "Date"
  local minutes = integral(o.validityMinutes)
  if not keepExpiry or o.validityMinutes ~= nil then
    if not minutes or minutes < 1 or minutes > MAX_VALIDITY then
      fail(cloud.codes.VALIDATION_ERROR, "validityMinutes is required: a whole number of minutes from 1 to " .. MAX_VALIDITY)
    end
    o.validityMinutes = minutes
  end
  if not keepExpiry then o.expiresAt = dateAt(time.now() + minutes * 60000) end
  for _, c in ipairs(COUNTERS) do
    if not req.master or integral(o[c]) == nil then o[c] = 0 end
  end
  for _, f in ipairs(FLAGS) do
    if o[f] == nil then o[f] = false end
  end
  -- Public read, author write (functions/README.md), whoever created it.
  o.ACL = {["*"] = {read = true}, [o.author.objectId] = {read = true, write = true}}
end

cloud.beforeSave("Post", function(req)
  local o, original = req.object, req.original
  if original == nil then return onCreate(req, o) end
  if req.master then
    -- Counter increments and administrative edits: only the editable fields are checked.
    if o.text ~= original.text or o.category ~= original.category then checkEditable(o) end
    return
  end
  for _, f in ipairs(LOCKED) do
    if not same(o[f], original[f]) then fail(cloud.codes.VALIDATION_ERROR, f .. " cannot be changed by clients") end
  end
  checkEditable(o)
end)

-- Adds authorUsername / authorAvatar and strips what the hide flags hide from anyone but the
-- author. A client's `keys` may leave the flags or the author out of the objects: then they are
-- read back with the master key, so a projection can never reveal a hidden field.
cloud.afterFind("Post", function(req)
  local objects = req.objects
  if objects == nil or #objects == 0 then return objects end
  local missing = {}
  for _, o in ipairs(objects) do
    if o.objectId and (o.author == nil or o.hideLocation == nil or o.hideUsername == nil or o.hideProfilePic == nil) then
      missing[#missing + 1] = o.objectId
    end
  end
  local stored = {}
  if #missing > 0 then
    for _, p in ipairs(db.find("Post", {objectId = {["$in"] = missing}},
        {keys = "author,hideLocation,hideUsername,hideProfilePic", limit = #missing, master = true})) do
      stored[p.objectId] = p
    end
  end
  local ids, seen = {}, {}
  for _, o in ipairs(objects) do
    local s = stored[o.objectId] or o
    local a = s.author
    if type(a) == "table" and a.objectId and not seen[a.objectId] then
      seen[a.objectId] = true
      ids[#ids + 1] = a.objectId
    end
  end
  local users = {}
  if #ids > 0 then
    for _, u in ipairs(db.find("_User", {objectId = {["$in"] = ids}},
        {keys = "username,avatar", limit = #ids, master = true})) do
      users[u.objectId] = u
    end
  end
  local me = req.user and req.user.objectId
  for _, o in ipairs(objects) do
    local s = stored[o.objectId] or o
    local authorId = type(s.author) == "table" and s.author.objectId or nil
    local u = authorId and users[authorId]
    if u then
      o.authorUsername = u.username
      if present(u.avatar) then o.authorAvatar = u.avatar end
    end
    if authorId == nil or authorId ~= me then
      if s.hideLocation == true then o.location = nil end
      if s.hideUsername == true then o.author = nil; o.authorUsername = nil end
      if s.hideProfilePic == true then o.authorAvatar = nil end
    end
  end
  return objects
end)

-- The post's comments, reactions and views go with it, in the deleting transaction, set-based.
cloud.beforeDelete("Post", function(req)
  local p = ptr("Post", req.object.objectId)
  db.deleteWhere("Comment", {post = p}, {master = true, triggers = false})
  db.deleteWhere("Reaction", {post = p}, {master = true, triggers = false})
  db.deleteWhere("View", {post = p}, {master = true, triggers = false})
end)

-- After commit: the photo file. A file already gone is not an error worth failing over.
cloud.afterDelete("Post", function(req)
  deleteFileQuietly(req.object.photo, "photo of post " .. tostring(req.object.objectId))
end)
