-- Comments (APP.md): validation and the post's commentsCount in triggers, so every path (the
-- REST API, Cloud Code, cascades with triggers) keeps the counter exact; and the `comments`
-- function: a post's comments oldest first, `limit` (default 5) at a time, each with
-- authorUsername.

local function fail(code, message) error(cloud.error(code, message), 0) end

local function ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end

local function present(v) return v ~= nil and v ~= json.null end

local function pointerId(v, className)
  if type(v) == "table" and v.__type == "Pointer" and v.className == className and type(v.objectId) == "string" then
    return v.objectId
  end
  return nil
end

local function integral(v)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge or v ~= math.floor(v) then return nil end
  return math.tointeger(v)
end

-- An optional whole-number parameter within [lo, hi].
local function intParam(params, name, default, lo, hi)
  local v = params[name]
  if not present(v) then return default end
  local n = integral(v)
  if not n or n < lo or n > hi then fail(142, name .. " must be a whole number from " .. lo .. " to " .. hi) end
  return n
end

local function checkText(text)
  if type(text) ~= "string" then fail(142, "text is required and must be a string") end
  local n = utf8.len(text)
  if not n then fail(142, "text must be valid UTF-8") end
  if not text:find("%S") then fail(142, "text must not be empty") end
  if n > 500 then fail(142, "text must be at most 500 characters (got " .. n .. ")") end
end

-- Adds to the post's counter by an SQL increment; a post already gone has nothing to fix.
local function bumpPost(postId, field, amount)
  if db.get("Post", postId, {keys = "objectId", master = true}) then
    db.update("Post", postId, {[field] = {__op = "Increment", amount = amount}}, {master = true})
  end
end

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
        fail(142, "author (a _User pointer) is required when the master key creates a comment")
      end
    else
      if not req.user then fail(142, "login required") end
      o.author = ptr("_User", req.user.objectId)
    end
    checkText(o.text)
    local postId = pointerId(o.post, "Post")
    if not postId then fail(142, "post is required and must be a Post pointer") end
    if not db.get("Post", postId, {keys = "objectId", master = true}) then fail(142, "post " .. postId .. " does not exist") end
    if present(o.replyTo) then
      local replyId = pointerId(o.replyTo, "Comment")
      if not replyId then fail(142, "replyTo must be a Comment pointer") end
      local target = db.get("Comment", replyId, {keys = "post", master = true})
      if not target or pointerId(target.post, "Post") ~= postId then
        fail(142, "replyTo must be a comment on the same post")
      end
    end
    o.ACL = {["*"] = {read = true}, [o.author.objectId] = {read = true, write = true}}
    db.update("Post", postId, {commentsCount = {__op = "Increment", amount = 1}}, {master = true})
    return
  end
  for _, f in ipairs({"post", "author", "replyTo"}) do
    if not sameRef(o[f], original[f]) then fail(142, f .. " of a comment cannot be changed") end
  end
  checkText(o.text)
end)

cloud.beforeDelete("Comment", function(req)
  local postId = pointerId(req.object.post, "Post")
  if postId then bumpPost(postId, "commentsCount", -1) end
end)

cloud.define("comments", {requireUser = true}, function(req)
  local params = req.params or {}
  local postId = params.postId
  if type(postId) ~= "string" or postId == "" then fail(142, "postId is required") end
  local limit = intParam(params, "limit", 5, 1, 100)
  local skip = intParam(params, "skip", 0, 0, 100000)
  if not db.get("Post", postId, {keys = "objectId", master = true}) then fail(101, "post not found: " .. postId) end
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
  if #list == 0 then return json.array() end
  return list
end)
