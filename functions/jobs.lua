-- Jobs (functions/README.md "Job and schedule"):
--   cleanupExpiredPosts {graceMinutes = 0}: deletes posts whose expiresAt is before now minus
--     graceMinutes (negative: also posts expiring within that many minutes) with their comments,
--     reactions and views, in batches of 1000 posts with set-based deletes; a transaction takes
--     batches until it holds 10,000 posts, or at least 2,000 and it has run 250 ms; photos are
--     removed after it commits.
--     Final message {"deleted":N}.
--   seedDemo: demo users, posts around San Francisco and Paris, comments, reactions and views,
--     so a fresh `make run` shows a living app. Does nothing when posts already exist.

local app = require("lib.app")
local fail, ptr, present, dateAt, deleteFileQuietly = app.fail, app.ptr, app.present, app.dateAt, app.deleteFileQuietly

local BATCH = 1000  -- the largest $in list a query takes
-- Batches per transaction. Every commit rewrites each page it dirtied, and the child deletes hit
-- the random-keyed B-trees (objectId indexes, the pointer indexes on post) nearly everywhere, so
-- a commit of 1000 posts wrote ~24 MB of WAL whatever its size: W6 (100,000 posts) spent half
-- its time in WAL writes and checkpoints. Grouping batches shares that cost; the time bound
-- keeps other writers from waiting long behind the job. The floor keeps that sharing when the
-- machine is busy: with only the time bound a slowed job committed every few hundred posts, so
-- it wrote more and slowed further (W6 at load 8-12: 12-16 GB written, 24-29 s CPU; with the
-- floor 10-13 GB, 19-23 s).
local TX_POSTS = 10000
local TX_MIN_POSTS = 2000
local TX_MILLIS = 250

cloud.job("cleanupExpiredPosts", function(req)
  local params = req.params or {}
  local grace = params.graceMinutes
  if not present(grace) then grace = 0 end
  if type(grace) ~= "number" or grace ~= grace or grace > 5256000 or grace < -5256000 then
    fail(cloud.codes.VALIDATION_ERROR, "graceMinutes must be a number of minutes (at most ten years either way)")
  end
  local cutoff = dateAt(time.now() - math.floor(grace * 60000))
  local expired = {expiresAt = {["$lt"] = cutoff}}
  local total = db.count("Post", expired, {master = true})
  req.progress(0, "deleting " .. total .. " expired posts")
  local set = {master = true, triggers = false}
  -- One batch: up to BATCH expired posts with their children; returns (posts deleted, posts found).
  local function deleteBatch(photos)
    local batch = db.find("Post", expired, {keys = "photo", limit = BATCH, master = true})
    if #batch == 0 then return 0 end
    local ids, posts = {}, {}
    for i, p in ipairs(batch) do
      ids[i] = p.objectId
      posts[i] = ptr("Post", p.objectId)
      if present(p.photo) then photos[#photos + 1] = p.photo end
    end
    db.deleteWhere("Comment", {post = {["$in"] = posts}}, set)
    db.deleteWhere("Reaction", {post = {["$in"] = posts}}, set)
    db.deleteWhere("View", {post = {["$in"] = posts}}, set)
    return db.deleteWhere("Post", {objectId = {["$in"] = ids}}, set), #batch
  end
  local deleted, done = 0, false
  while not done do
    local photos, n = {}, 0
    db.transaction(function()
      local started = time.now()
      repeat
        local gone, found = deleteBatch(photos)
        n = n + gone
        if (found or 0) < BATCH then done = true end
      until done or n >= TX_POSTS or (n >= TX_MIN_POSTS and time.now() - started >= TX_MILLIS)
    end)
    deleted = deleted + n
    for _, photo in ipairs(photos) do deleteFileQuietly(photo, "photo " .. tostring(photo.name)) end
    if n == 0 then break end
    req.progress(math.min(1, deleted / math.max(total, 1)), "deleted " .. deleted .. " of " .. total)
  end
  return {deleted = deleted}
end)

-- seedDemo --------------------------------------------------------------------------------

local DEMO_PASSWORD = "moonbase-demo"
local USERS = {
  {"alice", "Alice Martin", "female", "San Francisco", "1992-04-11"},
  {"bruno", "Bruno Costa", "male", "San Francisco", "1988-09-23"},
  {"chloe", "Chloé Bernard", "female", "Paris", "1995-01-30"},
  {"dev", "Dev Sharma", "other", "Paris", "1990-06-05"},
  {"emma", "Emma Dubois", "female", "Paris", "1998-12-17"},
  {"felix", "Felix Wagner", "male", "San Francisco", "1985-03-08"},
}
local CITIES = {
  {name = "San Francisco", latitude = 37.7749, longitude = -122.4194},
  {name = "Paris", latitude = 48.8566, longitude = 2.3522},
}
local TEXTS = {
  Coffee = {"Flat white of the year, no queue right now", "Tiny espresso bar with a sunny terrace"},
  Food = {"Taco truck parked by the park, get the al pastor", "Fresh croissants just out of the oven"},
  Drinks = {"Happy hour on the rooftop until 8", "Natural wine bar with live jazz tonight"},
  Sights = {"Fog rolling over the bridge, unreal view", "Sunset from the hill, bring a jacket"},
  Arts = {"Street mural being painted right now", "Free gallery opening, great photos inside"},
}
local CATEGORY_NAMES = {"Coffee", "Food", "Drinks", "Sights", "Arts"}
local VALIDITIES = {180, 720, 1440, 4320, 10080}
local COMMENTS = {"On my way!", "Thanks for the tip", "Still there?", "Looks amazing", "Been there yesterday, loved it"}

cloud.job("seedDemo", function(req)
  if db.count("Post", {}, {master = true}) > 0 then
    return "skipped: the server already has posts"
  end
  -- A fixed linear congruential sequence: the same demo on every fresh server.
  local state = 20240601
  local function pick(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return (state // 65536) % n + 1
  end
  local users = {}
  for i, u in ipairs(USERS) do
    local existing = db.first("_User", {username = u[1]}, {keys = "objectId", master = true})
    local id = existing and existing.objectId
    if not id then
      id = db.create("_User", {username = u[1], password = DEMO_PASSWORD, email = u[1] .. "@demo.moonbase.test",
        fullname = u[2], gender = u[3], city = u[4], birthdate = {__type = "Date", iso = u[5] .. "T00:00:00.000Z"}},
        {master = true}).objectId
    end
    users[i] = id
  end
  req.progress(0.2, "users ready")
  local posts, comments, reactions, views = 0, 0, 0, 0
  for c, city in ipairs(CITIES) do
    for k = 1, 12 do
      local author = users[pick(#users)]
      local category = CATEGORY_NAMES[pick(#CATEGORY_NAMES)]
      local texts = TEXTS[category]
      local post = db.create("Post", {
        author = ptr("_User", author),
        text = texts[pick(#texts)],
        category = category,
        location = {__type = "GeoPoint", latitude = city.latitude + (pick(601) - 301) / 10000,
                    longitude = city.longitude + (pick(601) - 301) / 10000},
        validityMinutes = VALIDITIES[pick(#VALIDITIES)],
        hideLocation = false, hideUsername = pick(6) == 1, hideProfilePic = false,
      }, {master = true})
      posts = posts + 1
      local postRef = ptr("Post", post.objectId)
      for _, other in ipairs(users) do
        if other ~= author then
          local roll = pick(10)
          if roll <= 6 then
            db.create("View", {post = postRef, user = ptr("_User", other)}, {master = true})
            views = views + 1
            if roll <= 4 then
              db.create("Reaction", {post = postRef, user = ptr("_User", other), kind = roll <= 3 and "like" or "dislike"}, {master = true})
              reactions = reactions + 1
            end
            if roll == 1 or roll == 5 then
              db.create("Comment", {post = postRef, author = ptr("_User", other), text = COMMENTS[pick(#COMMENTS)]}, {master = true})
              comments = comments + 1
            end
          end
        end
      end
      req.progress(0.2 + 0.8 * ((c - 1) * 12 + k) / (#CITIES * 12), "post " .. posts)
    end
  end
  return {users = #users, posts = posts, comments = comments, reactions = reactions, views = views,
          password = DEMO_PASSWORD}
end)
