-- GET reads of random players (python -m benchmarks http).
-- Environment: PREFIX (/v1/boards/<board>), SIZE (players p0..p{SIZE-1}),
-- ROUTE: "player" (exact rank), "around" (radius 5), "top" (top-100), "cohort" (the player's league
-- cohort, docs/api.md §16) or "friends" (the player's friends ranked locally).

local prefix = os.getenv("PREFIX")
local size = tonumber(os.getenv("SIZE") or "10000")
local route = os.getenv("ROUTE") or "player"

function init(args)
  math.randomseed(os.time() * 1000 + math.random(1, 100000))
end

function request()
  if route == "top" then
    return wrk.format("GET", prefix .. "/top?limit=100")
  end
  local path = prefix .. "/players/p" .. tostring(math.random(0, size - 1))
  if route == "around" then
    path = path .. "/around?radius=5"
  elseif route == "cohort" or route == "friends" then
    path = path .. "/" .. route
  end
  return wrk.format("GET", path)
end
