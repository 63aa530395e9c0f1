-- One model request's usage, as the egress read it from the provider's
-- answer (smcp_usage.h), added to its run's metered totals: the tokens
-- and the cost that the run's maxCostUsd is held against, whatever the
-- agent says.  Only a run that exists and is the token's tenant's takes
-- it: a run deleted meanwhile is not made anew.
--
-- KEYS[1] run:{id}
-- ARGV: tenant, input tokens, output tokens, cache read tokens, cache
-- write tokens, cost in USD (a decimal string), 1 when the cost came from
-- no price (0 otherwise)
--
-- Returns the run's metered cost after this request (a string), or nil
-- (unknown run, or another tenant's).
if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[1] then return nil end
-- counts: whole numbers of at most 15 digits; anything else adds nothing
for i, f in ipairs({'metered_input', 'metered_output', 'metered_cache_read',
                    'metered_cache_write'}) do
  local v = ARGV[i + 1]
  if string.match(v, '^%d+$') and #v <= 15 and tonumber(v) > 0 then
    redis.call('HINCRBY', KEYS[1], f, v)
  end
end
if ARGV[7] == '1' then
  redis.call('HINCRBY', KEYS[1], 'metered_unpriced', 1)
end
-- the cost: a plain decimal, below 1e12
local c = string.match(ARGV[6], '^%d+%.?%d*$') and tonumber(ARGV[6])
if c and c > 0 and c < 1e12 then
  return redis.call('HINCRBYFLOAT', KEYS[1], 'metered_cost', ARGV[6])
end
return redis.call('HGET', KEYS[1], 'metered_cost') or '0'
