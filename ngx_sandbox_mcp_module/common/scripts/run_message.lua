-- A message for a run's agent (opencode_send_message, the run page's
-- message box): queued in the run's inbox, where the sandbox takes it
-- (run_inbox.lua, through the egress route `inbox`) and hands it to
-- OpenCode's server in the run's own session.  The message is an event of
-- the run's timeline: who sent it, when, its text.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:inbox (list: the messages waiting,
--         JSON {id, text}, oldest first)   KEYS[3] run:{id}:events
-- KEYS[4] channel run:{id}   KEYS[5] egress:routes
-- KEYS[6] tenant:{tenant}:usage
-- ARGV: tenant, now (ms), the text, who sent it, events maxlen, the most
-- messages waiting at once, the most messages a run is sent, the names of
-- the statuses `started` and `running`, how it came (mcp | dashboard),
-- the inbox's lifetime (s) from its last message (longer than any run
-- lasts: a message still waiting when the run ends, which its timeline
-- keeps as not delivered, goes with the inbox a bounded while later),
-- the grants of the token that sends it (as run_create reads them; "*"
-- for the tenant's own dashboard)
--
-- The message steers the run's agent, which works on every repository of
-- the run (and may push to the first): each must be granted, as for a
-- follow-up (lib/grants.lua; "*" lets any through).  Its event and its
-- inbox entry count in the run's `bytes` and the tenant's (MESSAGE_BYTES
-- and the text, twice), which the run's finish lists for its expiry as
-- any of its bytes.
--
-- Returns nil (unknown, or another tenant's: nothing written), or
-- {'ok', message id, messages waiting}, or a refusal that writes nothing:
-- {'ended', status} (ended, or its cancel asked: "cancel requested") |
-- {'grant', URL} (a repository of the run not granted) | {'full',
-- waiting} | {'limit', sent} | {'noroute'} (the egress announces its
-- routes and `inbox` is not one of them) | {'agent', AGENT} (the run's
-- agent is not OpenCode: nothing in its sandbox takes messages).
--@include grants
local MESSAGE_BYTES = 256
local started, running = ARGV[8], ARGV[9]

local h = redis.call('HMGET', KEYS[1], 'tenant', 'status', 'messages',
                     'cancel_requested', 'repository', 'repositories',
                     'agent')
if h[1] ~= ARGV[1] then return nil end
if h[2] ~= started and h[2] ~= running then
  return {'ended', h[2] or ''}
end
if h[4] == '1' then return {'ended', 'cancel requested'} end
if h[7] and h[7] ~= 'opencode' then return {'agent', h[7]} end

local url = ungranted(ARGV[12], run_urls(h[5], h[6]), true)
if url then return {'grant', url} end

local routes = redis.call('GET', KEYS[5])
if routes and not string.find(' ' .. routes .. ' ', ' inbox ', 1, true) then
  return {'noroute'}
end

local waiting = redis.call('LLEN', KEYS[2])
if waiting >= tonumber(ARGV[6]) then return {'full', waiting} end
local sent = tonumber(h[3]) or 0
if sent >= tonumber(ARGV[7]) then return {'limit', sent} end

local id = redis.call('HINCRBY', KEYS[1], 'messages', 1)
redis.call('RPUSH', KEYS[2], cjson.encode({id = id, text = ARGV[3]}))
redis.call('EXPIRE', KEYS[2], ARGV[11])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*',
  'type', 'message',
  'data', cjson.encode({id = id, from = ARGV[4], via = ARGV[10],
                        text = ARGV[3]}),
  'ts', ARGV[2])
local n = MESSAGE_BYTES + 2 * #ARGV[3]
redis.call('HINCRBY', KEYS[1], 'bytes', n)
redis.call('HINCRBY', KEYS[6], 'bytes', n)
redis.call('PUBLISH', KEYS[4], 'message')
return {'ok', id, waiting + 1}
