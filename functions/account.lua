-- Accounts (functions/README.md): _User validation, the user cascade (beforeDelete: REST deletes with the
-- master key or by the user, and deleteAccount), the avatar removed after commit, and the
-- caller's own data: myData, stats, deleteAccount.

local app = require("lib.app")
local fail, ptr, present, increment, deleteFileQuietly = app.fail, app.ptr, app.present, app.increment, app.deleteFileQuietly

local GENDERS = {female = true, male = true, other = true}
local PAGE = 10000   -- Lua's db.find maximum
local CHUNK = 1000   -- the largest $in list a query takes

-- The objectId of a pointer or object table (or an id string, as distinct may return).
local function idOf(v)
  if type(v) == "table" then return v.objectId end
  if type(v) == "string" then return v end
  return nil
end

-- Every row of `className` matching `where` (master read), paged by the find maximum.
local function all(className, where, keys)
  local out, skip = {}, 0
  while true do
    local page = db.find(className, where, {keys = keys, order = "createdAt", limit = PAGE, skip = skip, master = true})
    for _, o in ipairs(page) do out[#out + 1] = o end
    if #page < PAGE then return out end
    skip = skip + #page
  end
end

-- Calls fn(list) on consecutive slices of at most CHUNK elements.
local function chunked(list, fn)
  for i = 1, #list, CHUNK do
    local slice = {}
    for j = i, math.min(i + CHUNK - 1, #list) do slice[#slice + 1] = list[j] end
    fn(slice)
  end
end

local function pointers(className, ids)
  local out = {}
  for i, id in ipairs(ids) do out[i] = ptr(className, id) end
  return out
end

-- Percent with one decimal, half up; 0 when there is nothing to divide by.
local function percent(part, whole)
  if whole == 0 then return 0 end
  return math.floor(part * 1000 / whole + 0.5) / 10
end

local function size(set)
  local n = 0
  for _ in pairs(set) do n = n + 1 end
  return n
end

-- Deletes everything of one user but the _User row itself and returns the counts. Their posts'
-- comments, reactions and views go set-based; the posts go one by one so Post's afterDelete
-- removes each photo after commit; their own comments, reactions and views on other users' posts
-- go set-based and those posts' counters are fixed with one increment per post. Idempotent: a
-- second run (the _User beforeDelete under deleteAccount) finds nothing left.
local function cascadeUser(userId)
  local me = ptr("_User", userId)
  local n = {posts = 0, comments = 0, reactions = 0, views = 0}
  local postIds = {}
  for _, p in ipairs(all("Post", {author = me}, "objectId")) do postIds[#postIds + 1] = p.objectId end
  chunked(postIds, function(ids)
    local inPosts = {post = {["$in"] = pointers("Post", ids)}}
    local opts = {master = true, triggers = false}
    n.comments = n.comments + db.deleteWhere("Comment", inPosts, opts)
    n.reactions = n.reactions + db.deleteWhere("Reaction", inPosts, opts)
    n.views = n.views + db.deleteWhere("View", inPosts, opts)
  end)
  if #postIds > 0 then n.posts = db.deleteWhere("Post", {author = me}, {master = true}) end

  local fixes, order = {}, {}
  local function fix(postRef, field)
    local id = idOf(postRef)
    if not id then return end
    local f = fixes[id]
    if not f then f = {}; fixes[id] = f; order[#order + 1] = id end
    f[field] = (f[field] or 0) - 1
  end
  for _, c in ipairs(all("Comment", {author = me}, "post")) do fix(c.post, "commentsCount") end
  for _, r in ipairs(all("Reaction", {user = me}, "post,kind")) do
    if r.kind == "like" then fix(r.post, "likesCount") elseif r.kind == "dislike" then fix(r.post, "dislikesCount") end
  end
  for _, v in ipairs(all("View", {user = me}, "post")) do fix(v.post, "viewsCount") end
  local opts = {master = true, triggers = false}
  n.comments = n.comments + db.deleteWhere("Comment", {author = me}, opts)
  n.reactions = n.reactions + db.deleteWhere("Reaction", {user = me}, opts)
  n.views = n.views + db.deleteWhere("View", {user = me}, opts)
  chunked(order, function(ids)
    for _, p in ipairs(db.find("Post", {objectId = {["$in"] = ids}}, {keys = "objectId", limit = #ids, master = true})) do
      local changes = {}
      for field, amount in pairs(fixes[p.objectId]) do changes[field] = {__op = "Increment", amount = amount} end
      db.update("Post", p.objectId, changes, {master = true})
    end
  end)
  auth.revokeSessions(me)
  return n
end

cloud.beforeSave("_User", function(req)
  local o = req.object
  if present(o.gender) and not GENDERS[o.gender] then fail(cloud.codes.VALIDATION_ERROR, "gender must be female, male or other") end
  if present(o.birthdate) and (type(o.birthdate) ~= "table" or o.birthdate.__type ~= "Date") then
    fail(cloud.codes.VALIDATION_ERROR, "birthdate must be a Date")
  end
end)

cloud.beforeDelete("_User", function(req)
  cascadeUser(req.object.objectId)
end)

cloud.afterDelete("_User", function(req)
  deleteFileQuietly(req.object.avatar, "avatar of user " .. tostring(req.object.objectId))
end)

-- deleteAccount {password} -> {deleted = {posts, comments, reactions, views}}: one transaction.
cloud.define("deleteAccount", {requireUser = true, maxDbOps = 200000, timeoutMs = 60000}, function(req)
  local password = req.params and req.params.password
  if type(password) ~= "string" or password == "" then fail(cloud.codes.VALIDATION_ERROR, "password is required") end
  if not auth.verifyPassword(req.user, password) then fail(cloud.codes.OBJECT_NOT_FOUND, "wrong password") end
  local userId, counts = req.user.objectId, nil
  db.transaction(function()
    counts = cascadeUser(userId)
    db.delete("_User", userId, {master = true})
  end)
  return {deleted = counts}
end)

-- Posts of the given ids as the caller sees them (afterFind applies), in the order of `ids`.
local function postsInOrder(ids)
  local byId, out = {}, {}
  chunked(ids, function(slice)
    for _, p in ipairs(db.find("Post", {objectId = {["$in"] = slice}}, {limit = #slice})) do byId[p.objectId] = p end
  end)
  for _, id in ipairs(ids) do if byId[id] then out[#out + 1] = byId[id] end end
  return json.array(out)
end

local function reactedPosts(me, kind)
  local ids = {}
  for _, r in ipairs(db.find("Reaction", {user = me, kind = kind}, {keys = "post", order = "-createdAt", limit = PAGE, master = true})) do
    local id = idOf(r.post)
    if id then ids[#ids + 1] = id end
  end
  return postsInOrder(ids)
end

-- myData -> {posts, comments, likes, dislikes}: the caller's posts and comments (newest first),
-- and the posts they liked and disliked (most recent reaction first).
cloud.define("myData", {requireUser = true}, function(req)
  local me = ptr("_User", req.user.objectId)
  local username = req.user.username
  if username == nil then
    local u = db.get("_User", req.user.objectId, {keys = "username", master = true})
    username = u and u.username
  end
  local posts = db.find("Post", {author = me}, {order = "-createdAt", limit = PAGE})
  local comments = db.find("Comment", {author = me}, {order = "-createdAt", limit = PAGE})
  for _, c in ipairs(comments) do c.authorUsername = username end
  return {
    posts = json.array(posts),
    comments = json.array(comments),
    likes = reactedPosts(me, "like"),
    dislikes = reactedPosts(me, "dislike"),
  }
end)

-- stats -> {account = {posts, comments, views}, insights = {popularity, engagement},
-- audience = {female, male, other}} as functions/README.md defines them. Views, commenters and reactors are
-- other users (the author's own rows never count); audience is the gender split of the distinct
-- other users who viewed the caller's posts, over those whose gender is known.
cloud.define("stats", {requireUser = true}, function(req)
  local me = ptr("_User", req.user.objectId)
  local postIds = {}
  for _, p in ipairs(all("Post", {author = me}, "objectId")) do postIds[#postIds + 1] = p.objectId end
  local views, reactions, likes = 0, 0, 0
  local viewers, engaged, everyone = {}, {}, {}
  local function collect(set, className, field, where)
    for _, v in ipairs(db.distinct(className, field, where, {master = true})) do
      local id = idOf(v)
      if id and id ~= me.objectId then set[id] = true; everyone[id] = true end
    end
  end
  chunked(postIds, function(ids)
    local inPosts = {["$in"] = pointers("Post", ids)}
    local others = {["$ne"] = me}
    views = views + db.count("View", {post = inPosts, user = others}, {master = true})
    reactions = reactions + db.count("Reaction", {post = inPosts}, {master = true})
    likes = likes + db.count("Reaction", {post = inPosts, kind = "like"}, {master = true})
    collect(viewers, "View", "user", {post = inPosts, user = others})
    collect(engaged, "Comment", "author", {post = inPosts, author = others})
    collect(engaged, "Reaction", "user", {post = inPosts, user = others})
  end)
  local genders = {female = 0, male = 0, other = 0}
  local viewerIds = {}
  for id in pairs(viewers) do viewerIds[#viewerIds + 1] = id end
  local known = 0
  chunked(viewerIds, function(ids)
    for _, u in ipairs(db.find("_User", {objectId = {["$in"] = ids}}, {keys = "gender", limit = #ids, master = true})) do
      if GENDERS[u.gender] then genders[u.gender] = genders[u.gender] + 1; known = known + 1 end
    end
  end)
  return {
    account = {
      posts = #postIds,
      comments = db.count("Comment", {author = me}, {master = true}),
      views = views,
    },
    insights = {
      popularity = percent(likes, reactions),
      engagement = percent(size(engaged), size(everyone)),
    },
    audience = {
      female = percent(genders.female, known),
      male = percent(genders.male, known),
      other = percent(genders.other, known),
    },
  }
end)
