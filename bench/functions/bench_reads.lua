-- Bench-only Cloud Code (copied beside the shipped functions/ by bench/run.sh): the W1 variant
-- "a function doing 10 indexed reads". BenchRead holds rows {n = 1..1000} (benchSeedRead job);
-- each call reads 10 of them by the indexed field n with the caller's permissions (anonymous:
-- the rows carry no ACL, so they are public) and returns the sum of their n.

cloud.index("BenchRead", {"n"})

local ROWS = 1000
local state = 12345

cloud.define("benchReads", function(req)
  local sum = 0
  for _ = 1, 10 do
    state = (state * 1103515245 + 12345) % 2147483648
    local row = db.first("BenchRead", {n = state % ROWS + 1})
    if row == nil then error(cloud.error(101, "BenchRead is not seeded"), 0) end
    sum = sum + row.n
  end
  return {sum = sum}
end)
