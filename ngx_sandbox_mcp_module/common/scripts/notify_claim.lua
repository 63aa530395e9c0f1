-- A run's completion notification: one attempt claimed by a runner's
-- notify thread (runner/notify.c), while no other runner may take it.
--
-- KEYS[1] notify   KEYS[2] run:{id}
-- ARGV: run id, now (ms), lease (ms), a new delivery id (32 hex digits:
-- kept only by the first attempt)
--
-- The claim holds only while the run's score in `notify` is due (<= now):
-- its score moves to now + lease (a runner that dies meanwhile leaves it
-- to another one after the lease), `notify_attempts` counts the attempt,
-- `notify_delivery` and `notify_first` (ms) are set once.  A run whose
-- hash is gone (expired; or no hash) leaves `notify`: nothing is sent.
--
-- Returns {'ok', attempt, delivery id, first (ms)}; 'gone' (the run hash
-- is gone: dropped from KEYS[1]); 'taken' (not due: another runner has
-- it, or it is no longer listed).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then
  return 'taken'
end

if redis.call('TYPE', KEYS[2]).ok ~= 'hash' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 'gone'
end

redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[2]) + tonumber(ARGV[3]),
           ARGV[1])
-- a count that is none (written by something else) starts again
local n = tonumber(redis.call('HGET', KEYS[2], 'notify_attempts') or '0')
if not n or n < 0 or n >= 1e9 or n ~= math.floor(n) then n = 0 end
n = n + 1
redis.call('HSET', KEYS[2], 'notify_attempts', string.format('%d', n))
redis.call('HSETNX', KEYS[2], 'notify_delivery', ARGV[4])
redis.call('HSETNX', KEYS[2], 'notify_first', ARGV[2])
local h = redis.call('HMGET', KEYS[2], 'notify_delivery', 'notify_first')

return {'ok', n, h[1], h[2]}
