#!/usr/bin/env perl
# The runner and Redis going away, for real: it says so clearly, retries,
# and carries on once Redis is back (a run queued meanwhile completes; a
# run in flight while Redis was away still gets its outcome stored).
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack;
use SMCP::Test qw(wait_until);

# Redis keeps its data across the restarts (AOF), as in production
my $s = SMCP::Stack->new(redis_appendonly => 1, scripts => {
    'SCENARIO-QUICK' => [ { text => 'quick answer' } ],
    # 6 s between the events of the answer: it streams on while Redis is away
    'SCENARIO-SLOW' => [ { text => 'slow answer', delay => 6 } ],
});
my $t = $s->t;

###############################################################################
# Redis down before the runner starts: a clear error, retries, then work

$t->stop_redis;
my $runner = $s->start_runner(concurrency => 2);

ok(wait_until(60, sub { $s->runner_log($runner) =~ /level=error.*redis.*retrying/i }),
   'runner without Redis: a clear error and a retry in its log')
    or diag($s->runner_log_tail($runner, 10));
ok($s->runner_alive($runner), 'the runner stays up while Redis is away');

$t->start_redis;

# nginx reconnects with backoff: the first calls may still get a 503
sub run_task_retry {
    my (%a) = @_;
    my $run;
    wait_until(60, sub { $run = eval { $s->run_task(%a) }; $run }, 0.3);
    return $run // SMCP::Test::give_up('opencode_run_task never succeeded');
}

my $run = run_task_retry(task => 'SCENARIO-QUICK: answer');
my $r = $s->wait_done($run->{runId}, 300);
is($r->{status}, 'completed', 'Redis back: a queued run completes')
    or diag($s->runner_log_tail($runner, 20));
is($r->{result}, 'quick answer', '... with the model\'s answer');

###############################################################################
# Redis away while a run is in flight: the outcome is stored once it is back

$run = run_task_retry(task => 'SCENARIO-SLOW: answer slowly');
ok(wait_until(60, sub { ($s->run_hash($run->{runId})->{status} // '') eq 'running' }, 0.2),
   'the second run is running');
# its model call under way (let through by the egress proxy, which asks
# Redis): the answer streams on through the outage
ok(wait_until(120, sub {
    grep { ($_->{body} // '') =~ /SCENARIO-SLOW/ && ($_->{body} // '') !~ /title generator/i }
         $s->anthropic->requests }, 0.2), 'the model is answering it')
    or diag($s->runner_log_tail($runner, 20));

$t->stop_redis;
sleep(8);            # Redis away 8 s (the outage under test) mid-answer
ok($s->runner_alive($runner), 'the runner stays up while Redis is away mid-run');
$t->start_redis;

$r = $s->wait_done($run->{runId}, 300);
is($r->{status}, 'completed', 'the run in flight while Redis was away completes')
    or diag($s->runner_log_tail($runner, 20));
is($r->{result}, 'slow answer', '... with its answer');
ok(wait_until(30, sub { !$s->run_containers($run->{runId}) }, 0.5),
   '... and its sandbox is removed');
like($s->runner_log($runner), qr/level=error/, 'the runner logged the Redis trouble');
ok($s->runner_alive($runner), 'the runner is still up');

my $run3 = run_task_retry(task => 'SCENARIO-QUICK: again');
$r = $s->wait_done($run3->{runId}, 300);
is($r->{status}, 'completed', 'after the outage new runs complete')
    or diag($s->runner_log_tail($runner, 20));

$s->stop_runner($runner, 'TERM');
$s->done;
