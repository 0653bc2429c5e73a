-- W1 (function form) and the 10-indexed-reads variant: POST /parse/functions/NAME with body {}.
-- usage: wrk ... -s function.lua http://127.0.0.1:PORT -- NAME
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local parse = dofile(dir .. "parse.lua")
local name = "hello"
function init(args)
  name = args[1] or "hello"
  parse.headers()
end
function request()
  return wrk.format("POST", "/parse/functions/" .. name, nil, "{}")
end
