-- Comments (functions/README.md): validation and the post's commentsCount in triggers, so every path (the
-- REST API, Cloud Code, cascades with triggers) keeps the counter exact; and the `comments`
-- function: a post's comments oldest first, `limit` (default 5) at a time, each with
-- authorUsername.

local app = require("lib.app")
local fail, ptr, present, pointerId, intParam, checkText, increment, bumpPost, asList = app.fail, app.ptr, app.present, app.pointerId, app.intParam, app.checkText, app.increment, app.bumpPost, app.asList

local function sameRef(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  return a.objectId == b.objectId and a.className == b.className
end

cloud.beforeSave("Comment", function(req)
  local o, original = req.object, req.original
  if original == nil then
    if req.master then
      if not pointerId(o.author, "_User") then
        fail(cloud.codes.VALIDATION_ERROR, "author (a _User pointer) is required when the master key creates a comment")
      end
    else
      if not req.user then fail(cloud.codes.VALIDATION_ERROR, "login required") end
      o.author = ptr("_User", req.user.objectId)
    end
    checkText(o.text)
    local postId = pointerId(o.post, "Post")
    if not postId then fail(cloud.codes.VALIDATION_ERROR, "post is required and must be a Post pointer") end
    if not db.get("Post", postId, {keys = "objectId", master = true}) then fail(cloud.codes.VALIDATION_ERROR, "post " .. postId .. " does not exist") end
    if present(o.replyTo) then
      local replyId = pointerId(o.replyTo, "Comment")
      if not replyId then fail(cloud.codes.VALIDATION_ERROR, "replyTo must be a Comment pointer") end
      local target = db.get("Comment", replyId, {keys = "post", master = true})
      if not target or pointerId(target.post, "Post") ~= postId then
        fail(cloud.codes.VALIDATION_ERROR, "replyTo must be a comment on the same post")
      end
    end
    o.ACL = {["*"] = {read = true}, [o.author.objectId] = {read = true, write = true}}
    db.update("Post", postId, {commentsCount = increment(1)}, {master = true})
    return
  end
  for _, f in ipairs({"post", "author", "replyTo"}) do
    if not sameRef(o[f], original[f]) then fail(cloud.codes.VALIDATION_ERROR, f .. " of a comment cannot be changed") end
  end
  checkText(o.text)
end)

cloud.beforeDelete("Comment", function(req)
  local postId = pointerId(req.object.post, "Post")
  if postId then bumpPost(postId, {commentsCount = increment(-1)}) end
end)

cloud.define("comments", {requireUser = true}, function(req)
  local params = req.params or {}
  local postId = params.postId
  if type(postId) ~= "string" or postId == "" then fail(cloud.codes.VALIDATION_ERROR, "postId is required") end
  local limit = intParam(params, "limit", 5, 1, 100)
  local skip = intParam(params, "skip", 0, 0, 100000)
  if not db.get("Post", postId, {keys = "objectId", master = true}) then fail(cloud.codes.OBJECT_NOT_FOUND, "post not found: " .. postId) end
  local list = db.find("Comment", {post = ptr("Post", postId)}, {order = "createdAt", limit = limit, skip = skip})
  local ids, seen = {}, {}
  for _, c in ipairs(list) do
    local a = pointerId(c.author, "_User")
    if a and not seen[a] then seen[a] = true; ids[#ids + 1] = a end
  end
  local names = {}
  if #ids > 0 then
    for _, u in ipairs(db.find("_User", {objectId = {["$in"] = ids}}, {keys = "username", limit = #ids, master = true})) do
      names[u.objectId] = u.username
    end
  end
  for _, c in ipairs(list) do
    local a = pointerId(c.author, "_User")
    if a then c.authorUsername = names[a] end
  end
  return asList(list)
end)
