-- bench/floor's run_create: NOT a product script.  What is left of
-- run_create when a run is only its hash, the tenant's index and the queue
-- entry: no checks, no session (hash, indexes, repositories), no started
-- set (max queued), no session:{id}:active (max running), no first event,
-- no ping.  A run the runner could claim and nothing else could account
-- for: the least a durable run costs Redis.  Same KEYS and ARGV as the
-- module's run_create.lua (its header says which).
--
-- KEYS[1] run:{id}   KEYS[3] runs:{tenant}   KEYS[9] queue (the others unused)
-- ARGV as run_create.lua's; returns 1
redis.call('HSET', KEYS[1], 'tenant', ARGV[2], 'session', ARGV[3],
  'task', ARGV[6], 'repository', ARGV[7], 'repositories', '[]',
  'branch', ARGV[8], 'model', ARGV[9], 'title', ARGV[10],
  'create_pr', ARGV[11], 'base_branch', ARGV[24], 'pr_title', ARGV[25],
  'draft', ARGV[26], 'watch_base', ARGV[27],
  'timeout', ARGV[12], 'status', ARGV[21], 'created_at', ARGV[5],
  'max_running', ARGV[15], 'max_cost', ARGV[16], 'retention', ARGV[17],
  'image', ARGV[30] or '')
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('XADD', KEYS[9], '*', 'run', ARGV[1])
return 1
