-- POST /v1/events with BATCH fresh events per request (python -m benchmarks http).
-- Environment: BOARD (board id), SIZE (players p0..p{SIZE-1}), BATCH (events per
-- request, default 500), RUN (a nonce: event ids never repeat across runs).
-- Event ids are RUN-thread-counter-i, so every request carries new ids: the
-- server sequences, dedups and applies all of them (outcome counts aside).

local board = os.getenv("BOARD")
-- BOARDS (comma-separated): each event for every one of them ("board_ids", docs/api.md §15) instead of BOARD
local boards = os.getenv("BOARDS")
local target = board and string.format('"board_id":"%s"', board) or ""
if boards and boards ~= "" then
  local quoted = {}
  for b in string.gmatch(boards, "[^,]+") do quoted[#quoted + 1] = '"' .. b .. '"' end
  target = '"board_ids":[' .. table.concat(quoted, ",") .. ']'
end
-- NOW_MS: achieved_at starts there (a series routes by it: its current window), else a fixed instant
local now_ms = tonumber(os.getenv("NOW_MS") or "0")
local size = tonumber(os.getenv("SIZE") or "10000")
local batch = tonumber(os.getenv("BATCH") or "500")
local run = os.getenv("RUN") or tostring(os.time())
local base_ms = 1793527200000

local threads = {}
local counter = 0
tid = 0  -- a global: setup() overwrites it per thread with thread:set("tid", n)

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() * 1000 + tid)
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  counter = counter + 1
  local parts = {}
  local prefix = run .. "-" .. tostring(tid) .. "-" .. tostring(counter) .. "-"
  for i = 1, batch do
    local p = math.random(0, size - 1)
    parts[i] = string.format(
      '{"event_id":"%s%d",%s,"player_id":"p%d","value":%d,"achieved_at":%d}',
      prefix, i, target, p, math.random(0, 1999999),
      now_ms > 0 and now_ms + (counter * batch + i) % 60000 or base_ms + counter * batch + i)
  end
  return wrk.format("POST", "/v1/events", nil, '{"events":[' .. table.concat(parts, ",") .. ']}')
end
