-- W2: POST /parse/classes/CLASS {text, category, likes, location: GeoPoint} in Parse's shape,
-- the same random documents (fixed seed 4242) as the peers kit's wrk/post.lua sends to PocketBase.
-- usage: wrk ... -s create.lua http://127.0.0.1:PORT -- [CLASS]   (default Bench)
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local parse = dofile(dir .. "parse.lua")
local cats = { "food", "events", "traffic", "lost", "misc" }
local path, n = "/parse/classes/Bench", 0
function init(args)
  math.randomseed(4242)
  path = "/parse/classes/" .. (args[1] or "Bench")
  parse.headers()
end
function request()
  n = n + 1
  local lat, lng = 40 + math.random(), -74.5 + math.random()
  local body = string.format('{"text":"wrk post %d","category":"%s","likes":0,"location":%s}',
    n, cats[math.random(1, #cats)], parse.point(lat, lng))
  return wrk.format("POST", path, nil, body)
end
