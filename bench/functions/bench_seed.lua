-- Bench-only Cloud Code (bench/run.sh copies it next to the shipped functions/ in a temporary
-- folder; it is never deployed with the app). Jobs that fill the benchmark data sets fast: each
-- batch is one db.transaction on the writer with master-key creates, started through
-- POST /parse/jobs/NAME like any job. Positions and ages follow the peers kit's common/seed.sql:
-- latitude uniform in [40, 41), longitude uniform in [-74.5, -73.5), five categories; the
-- harness spreads createdAt back in time afterwards (the store stamps creates with "now").

local CATS = {"food", "events", "traffic", "lost", "misc"}

local function ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end

local function dateAt(ms)
  return {__type = "Date", iso = os.date("!%Y-%m-%dT%H:%M:%S", ms // 1000) .. string.format(".%03dZ", ms % 1000)}
end

-- A fixed linear congruential sequence, so every run seeds the same positions.
local function lcg(seed)
  local state = seed
  return function()
    state = (state * 1103515245 + 12345) % 2147483648
    return state / 2147483648
  end
end

local function count(params, default)
  local n = params.count or default
  if math.type(n) ~= "integer" or n < 1 or n > 5000000 then
    error(cloud.error(142, "count must be an integer from 1 to 5,000,000"), 0)
  end
  return n
end

-- benchSeedPosts {className = "Bench", count = 100000, batch = 2000, seed = 1}: W3/W5 posts
-- {text, category, likes, location} with public read/write (created by the master key, no ACL).
cloud.job("benchSeedPosts", function(req)
  local p = req.params or {}
  local className = p.className or "Bench"
  local n, batch = count(p, 100000), p.batch or 2000
  local rnd = lcg(p.seed or 1)
  local done = 0
  while done < n do
    local last = math.min(n, done + batch)
    db.transaction(function()
      for k = done + 1, last do
        db.create(className, {
          text = "seed post #" .. k,
          category = CATS[k % 5 + 1],
          likes = 0,
          location = {__type = "GeoPoint", latitude = 40 + rnd(), longitude = -74.5 + rnd()},
        }, {master = true})
      end
    end)
    done = last
    req.progress(done / n, "created " .. done .. " of " .. n)
  end
  return {created = done}
end)

-- benchSeedRead {count = 1000}: rows {n = 1..count} in BenchRead, indexed on n (bench_reads.lua).
cloud.job("benchSeedRead", function(req)
  local n = count(req.params or {}, 1000)
  db.transaction(function()
    for k = 1, n do db.create("BenchRead", {n = k, text = "row " .. k}, {master = true}) end
  end)
  return {created = n}
end)

-- benchSeedExpired {count = 100000, comments = 3, reactions = 5, batch = 1000}: W6 data in the
-- reference app's classes (functions/schema.lua, functions/README.md): expired posts by a few real users, each
-- with `comments` comments and `reactions` reactions from distinct users (Reaction (post, user)
-- is unique), counters set to match. Run it WITHOUT the app's triggers loaded (they refuse
-- comments on expired posts and would recount), then serve the shipped functions/ for the job.
cloud.job("benchSeedExpired", function(req)
  local p = req.params or {}
  local n, nc, nr, batch = count(p, 100000), p.comments or 3, p.reactions or 5, p.batch or 1000
  local rnd = lcg(p.seed or 7)
  local users = {}
  for i = 1, math.max(nr, 1) do
    local name = "bench" .. i
    local u = db.first("_User", {username = name}, {keys = "objectId", master = true})
    users[i] = u and u.objectId or db.create("_User", {username = name, password = "bench-password-" .. i},
                                              {master = true}).objectId
  end
  local expired = dateAt(time.now() - 86400000)
  local done = 0
  while done < n do
    local last = math.min(n, done + batch)
    db.transaction(function()
      for k = done + 1, last do
        local author = users[k % #users + 1]
        local post = db.create("Post", {
          author = ptr("_User", author), text = "expired post #" .. k, category = "Food",
          location = {__type = "GeoPoint", latitude = 40 + rnd(), longitude = -74.5 + rnd()},
          validityMinutes = 60, expiresAt = expired,
          likesCount = nr, dislikesCount = 0, commentsCount = nc, viewsCount = 0,
          hideLocation = false, hideUsername = false, hideProfilePic = false,
          ACL = {["*"] = {read = true}, [author] = {read = true, write = true}},
        }, {master = true})
        local postRef = ptr("Post", post.objectId)
        for c = 1, nc do
          db.create("Comment", {post = postRef, author = ptr("_User", users[(k + c) % #users + 1]),
                                text = "comment " .. c}, {master = true})
        end
        for r = 1, nr do
          db.create("Reaction", {post = postRef, user = ptr("_User", users[r]), kind = "like"}, {master = true})
        end
      end
    end)
    done = last
    req.progress(done / n, "created " .. done .. " of " .. n)
  end
  return {posts = done, comments = done * nc, reactions = done * nr}
end)
