"""The Redis store's scripts: what must change together runs in one script, so two processes
never both take the last place and the totals never drift from what they count.

Keys (all under one hash tag; see `redis_store`): S the stream, J a job's hash, B the queued
bodies' bytes, E the epoch, R the kept answers (a sorted set: job id, scored by the time in ms
its answer expires), H the kept answers' totals (a hash: `bytes`, `n:<owner>`,
`bytes:<owner>`, and `r:<id>` = `<bytes>|<owner>` for each kept answer, so that one leaving
takes its own share off). An answer leaves R and H when its time comes, at the next submit or
finish (the job's own hash expires by itself at the same time)."""

from __future__ import annotations

_COMMON = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function release(H, id)
  local kept = redis.call('HGET', H, 'r:' .. id)
  if not kept then return end
  local size, owner = string.match(kept, '^(%d+)|(.*)$')
  redis.call('HINCRBY', H, 'bytes', -tonumber(size))
  redis.call('HINCRBY', H, 'bytes:' .. owner, -tonumber(size))
  if redis.call('HINCRBY', H, 'n:' .. owner, -1) <= 0 then
    redis.call('HDEL', H, 'n:' .. owner, 'bytes:' .. owner)
  end
  redis.call('HDEL', H, 'r:' .. id)
end

local function prune(R, H, now)
  local gone = redis.call('ZRANGEBYSCORE', R, '-inf', now, 'LIMIT', 0, 512)
  for _, id in ipairs(gone) do
    release(H, id)
    redis.call('ZREM', R, id)
  end
end

local function retry_after_ms(R, now)
  local first = redis.call('ZRANGE', R, 0, 0, 'WITHSCORES')
  if first[2] then return math.max(1000, tonumber(first[2]) - now) end
  return 1000
end
"""

SUBMIT = (
    _COMMON
    + """
-- KEYS: S J B E R H
-- ARGV: max jobs, max body bytes, body bytes, id, epoch, owner, max answers, max answer
--       bytes, owner's max answers (0: none), owner's max answer bytes, then the hash's fields
-- {1, jobs, held}: queued; {0, jobs, held}: queue full; {-1}: the epoch is not ARGV[5];
-- {2, n, bytes, retry ms}: answers full; {3, n, bytes, retry ms}: the owner's answers full
if redis.call('GET', KEYS[4]) ~= ARGV[5] then return {-1, 0, 0, 0} end
local now = now_ms()
prune(KEYS[5], KEYS[6], now)
local kept = redis.call('ZCARD', KEYS[5])
local kept_bytes = tonumber(redis.call('HGET', KEYS[6], 'bytes') or '0')
if kept >= tonumber(ARGV[7]) or kept_bytes >= tonumber(ARGV[8]) then
  return {2, kept, kept_bytes, retry_after_ms(KEYS[5], now)}
end
if tonumber(ARGV[9]) > 0 then
  local mine = tonumber(redis.call('HGET', KEYS[6], 'n:' .. ARGV[6]) or '0')
  local mine_bytes = tonumber(redis.call('HGET', KEYS[6], 'bytes:' .. ARGV[6]) or '0')
  if mine >= tonumber(ARGV[9]) or mine_bytes >= tonumber(ARGV[10]) then
    return {3, mine, mine_bytes, retry_after_ms(KEYS[5], now)}
  end
end
local jobs = redis.call('XLEN', KEYS[1])
local held = tonumber(redis.call('GET', KEYS[3]) or '0')
if jobs >= tonumber(ARGV[1]) or held + tonumber(ARGV[3]) > tonumber(ARGV[2]) then
  return {0, jobs, held, 0}
end
redis.call('HSET', KEYS[2], unpack(ARGV, 11))
redis.call('XADD', KEYS[1], '*', 'id', ARGV[4], 'bytes', ARGV[3])
redis.call('INCRBY', KEYS[3], ARGV[3])
return {1, jobs, held, 0}
"""
)

FINISH = (
    _COMMON
    + """
-- KEYS: S J B R H
-- ARGV: ticket, body bytes, ttl ms, id, owner, answer bytes, max answer bytes, owner's max
--       answer bytes (0: none), force ('1': keep it even over the bounds), then the fields
-- 1: kept; 0: no room for the answer (nothing changed)
local now = now_ms()
prune(KEYS[4], KEYS[5], now)
release(KEYS[5], ARGV[4])  -- finished before (two workers ran it): its old answer goes
local size = tonumber(ARGV[6])
if ARGV[9] ~= '1' then
  local kept_bytes = tonumber(redis.call('HGET', KEYS[5], 'bytes') or '0')
  if kept_bytes + size > tonumber(ARGV[7]) then return 0 end
  if tonumber(ARGV[8]) > 0 then
    local mine = tonumber(redis.call('HGET', KEYS[5], 'bytes:' .. ARGV[5]) or '0')
    if mine + size > tonumber(ARGV[8]) then return 0 end
  end
end
redis.call('HSET', KEYS[2], unpack(ARGV, 10))
redis.call('HDEL', KEYS[2], 'body')
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.pcall('XACK', KEYS[1], 'inferd', ARGV[1])
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('DECRBY', KEYS[3], ARGV[2])
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[3]), ARGV[4])
redis.call('HSET', KEYS[5], 'r:' .. ARGV[4], ARGV[6] .. '|' .. ARGV[5])
redis.call('HINCRBY', KEYS[5], 'bytes', size)
redis.call('HINCRBY', KEYS[5], 'bytes:' .. ARGV[5], size)
redis.call('HINCRBY', KEYS[5], 'n:' .. ARGV[5], 1)
return 1
"""
)

DROP = """
-- KEYS: S B; ARGV: ticket, body bytes. A queue entry whose job record is gone.
redis.pcall('XACK', KEYS[1], 'inferd', ARGV[1])
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('DECRBY', KEYS[2], ARGV[2])
end
return 1
"""
