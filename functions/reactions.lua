-- Reactions and views (functions/README.md): one Reaction (like | dislike) and one View per (post, user),
-- unique in the database. Their triggers keep the post's likesCount / dislikesCount / viewsCount
-- exact with SQL increments inside the writing transaction, whoever writes (react, viewPost,
-- the master key, cascades with triggers). Functions: react, viewPost.

local app = require("lib.app")
local fail, ptr, pointerId, increment, bumpPost = app.fail, app.ptr, app.pointerId, app.increment, app.bumpPost

local KINDS = {like = "likesCount", dislike = "dislikesCount"}

local function requirePostId(params)
  local id = params and params.postId
  if type(id) ~= "string" or id == "" then fail(cloud.codes.VALIDATION_ERROR, "postId is required") end
  return id
end

-- post and user of a Reaction / View: required on create, never changed afterwards.
local function checkRefs(o, original)
  local postId, userId = pointerId(o.post, "Post"), pointerId(o.user, "_User")
  if not postId then fail(cloud.codes.VALIDATION_ERROR, "post is required and must be a Post pointer") end
  if not userId then fail(cloud.codes.VALIDATION_ERROR, "user is required and must be a _User pointer") end
  if original and (postId ~= pointerId(original.post, "Post") or userId ~= pointerId(original.user, "_User")) then
    fail(cloud.codes.VALIDATION_ERROR, "post and user cannot be changed")
  end
  return postId, userId
end

cloud.beforeSave("Reaction", function(req)
  local o, original = req.object, req.original
  local postId = checkRefs(o, original)
  if not KINDS[o.kind] then fail(cloud.codes.VALIDATION_ERROR, "kind must be like or dislike") end
  if original == nil then
    if not db.get("Post", postId, {keys = "objectId", master = true}) then fail(cloud.codes.VALIDATION_ERROR, "post " .. postId .. " does not exist") end
    db.update("Post", postId, {[KINDS[o.kind]] = increment(1)}, {master = true})
  elseif original.kind ~= o.kind then
    local changes = {[KINDS[o.kind]] = increment(1)}
    if KINDS[original.kind] then changes[KINDS[original.kind]] = increment(-1) end
    bumpPost(postId, changes)
  end
end)

cloud.beforeDelete("Reaction", function(req)
  local postId = pointerId(req.object.post, "Post")
  local field = KINDS[req.object.kind]
  if postId and field then bumpPost(postId, {[field] = increment(-1)}) end
end)

cloud.beforeSave("View", function(req)
  local o, original = req.object, req.original
  local postId, userId = checkRefs(o, original)
  if original ~= nil then return end
  local post = db.get("Post", postId, {keys = "author", master = true})
  if not post then fail(cloud.codes.VALIDATION_ERROR, "post " .. postId .. " does not exist") end
  if pointerId(post.author, "_User") == userId then fail(cloud.codes.VALIDATION_ERROR, "an author's own view is not recorded") end
  db.update("Post", postId, {viewsCount = increment(1)}, {master = true})
end)

cloud.beforeDelete("View", function(req)
  local postId = pointerId(req.object.post, "Post")
  if postId then bumpPost(postId, {viewsCount = increment(-1)}) end
end)

-- react {postId, kind: like | dislike | none} -> {likesCount, dislikesCount, kind}.
-- One transaction on the writer: read the caller's reaction, change it, read the counts back.
-- Two devices racing are serialised by the transaction; the unique index is the backstop.
cloud.define("react", {requireUser = true}, function(req)
  local params = req.params or {}
  local postId = requirePostId(params)
  local kind = params.kind
  if kind ~= "like" and kind ~= "dislike" and kind ~= "none" then fail(cloud.codes.VALIDATION_ERROR, "kind must be like, dislike or none") end
  local me = ptr("_User", req.user.objectId)
  local result
  db.transaction(function()
    if not db.get("Post", postId, {keys = "objectId", master = true}) then fail(cloud.codes.OBJECT_NOT_FOUND, "post not found: " .. postId) end
    local post = ptr("Post", postId)
    local existing = db.first("Reaction", {post = post, user = me}, {master = true})
    if kind == "none" then
      if existing then db.delete("Reaction", existing.objectId, {master = true}) end
    elseif not existing then
      db.create("Reaction", {post = post, user = me, kind = kind}, {master = true})
    elseif existing.kind ~= kind then
      db.update("Reaction", existing.objectId, {kind = kind}, {master = true})
    end
    local counts = db.get("Post", postId, {keys = "likesCount,dislikesCount", master = true})
    result = {likesCount = counts.likesCount or 0, dislikesCount = counts.dislikesCount or 0, kind = kind}
  end)
  return result
end)

-- viewPost {postId} -> the post (as the caller may see it) with its counts. The caller's first
-- view creates their View row (and raises viewsCount through the trigger); the author's never.
cloud.define("viewPost", {requireUser = true}, function(req)
  local postId = requirePostId(req.params)
  local post = db.get("Post", postId, {keys = "author", master = true})
  if not post then fail(cloud.codes.OBJECT_NOT_FOUND, "post not found: " .. postId) end
  local meId = req.user.objectId
  if pointerId(post.author, "_User") ~= meId then
    db.transaction(function()
      local p, me = ptr("Post", postId), ptr("_User", meId)
      if not db.first("View", {post = p, user = me}, {keys = "objectId", master = true}) then
        db.create("View", {post = p, user = me}, {master = true})
      end
    end)
  end
  local seen = db.get("Post", postId)
  if not seen then fail(cloud.codes.OBJECT_NOT_FOUND, "post not found: " .. postId) end
  return seen
end)
