-- The benchmark endpoints (the W1 benchmark): a route and a function that do nothing but answer.
-- Kept free of any database access so they measure the host's own cost per request.

cloud.route("GET", "/hello", function(req)
  return {status = 200, json = {hello = "world"}}
end)

cloud.define("hello", function(req)
  return {hello = "world"}
end)
