-- The end of a pick run (opencode_pick_attempt; runner/pick.c): the
-- attempt's pull request once opened, or the pick undone for another try
-- (the attempt `pushed` again, the group without `picked`) on any other
-- end, the pick run failing before it tried included.  One step, and only
-- while the attempt's keys live and its pick is still this run's: an
-- attempt whose keys expired meanwhile is not made anew (no hash without
-- its tenant and expiry), and another pick's outcome is not touched.
-- Opened is final: a pick run taken up again after its runner went away
-- (or one of its runners paused, then back) neither undoes it nor writes
-- it again.
--
-- KEYS[1] run:{attempt}   KEYS[2] run:{group}
-- ARGV: the pick run's id, "opened" (else: undo), the pull request's URL
-- and number
--
-- Returns 1 when it wrote, 0 when the attempt is gone, not this run's
-- pick, or its pull request opened already.
local a = redis.call('HMGET', KEYS[1], 'pr_pick_run', 'tenant', 'pr_status')
if not a[2] or a[1] ~= ARGV[1] or a[3] == 'opened' then return 0 end
if ARGV[2] == 'opened' then
  redis.call('HSET', KEYS[1], 'pr_status', 'opened', 'pr_url', ARGV[3],
             'pr_number', ARGV[4])
  return 1
end
redis.call('HSET', KEYS[1], 'pr_status', 'pushed')
redis.call('HDEL', KEYS[1], 'pr_pick_run')
if redis.call('HGET', KEYS[2], 'tenant') == a[2] then
  redis.call('HDEL', KEYS[2], 'picked')
end
return 1
