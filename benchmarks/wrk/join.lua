-- POST joins of new players, each once (python -m benchmarks competitions).
-- Environment: PREFIX (/v1/boards/<board>), START (the first player number, j<START>...).

local prefix = os.getenv("PREFIX")
local counter = tonumber(os.getenv("START") or "0")

function request()
  counter = counter + 1
  return wrk.format("POST", prefix .. "/players/j" .. tostring(counter) .. "/join")
end
