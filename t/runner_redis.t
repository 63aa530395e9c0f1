#!/usr/bin/env perl
# The runner and Redis going away, for real: it says so clearly, retries,
# and carries on once Redis is back (a run queued meanwhile completes; a
# run in flight while Redis was away still gets its outcome stored).
# A server the runner reconnects to that lacks a run's last events (a
# replica promoted before they reached it): the runner reads the run's
# state again from it and stores them again from the container's log,
# its events and its totals exact.
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
    # the second step's answer 40 s late: time to take the first step's
    # events away and cut the runner's connections
    'SCENARIO-LOSS' => SMCP::Stack::four_steps('LOSS', 40, 0),
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

###############################################################################
# The server reached again lacks the run's last events, as a replica
# promoted before they reached it does (a failover): they are taken away
# (XDEL, and their bytes from event_bytes) while the run waits on the
# model, and every connection of the runner cut.  Without reading the
# run's state again the runner would go on after the lines it had done
# with: the events gone for good, and the run's totals counting them.

my $loss = run_task_retry(task => 'SCENARIO-LOSS: four steps');
my $lid = $loss->{runId};
ok(wait_until(180, sub {
    grep { ($_->{json}{type} // '') eq 'step_finish' } $s->stored_events($lid)
}, 0.3), 'a run has stored its first step and waits on the model')
    or diag($s->runner_log_tail($runner, 20));
my @lines = grep { defined $_->{dts} } $s->stored_events($lid);
my @gone = @lines[-2 .. -1];
my $bytes = 0;
$bytes += length($_->{data}) for @gone;
$t->redis('XDEL', "smcp:run:$lid:events", map { $_->{id} } @gone);
$t->redis('HINCRBY', "smcp:run:$lid", 'event_bytes', -$bytes);
my $killed = $t->redis('CLIENT', 'KILL', 'TYPE', 'normal');
note("took away: " . join(' ', map { $_->{json}{type} // '?' } @gone)
     . "; cut $killed connections");
is(scalar(grep { defined $_->{dts} } $s->stored_events($lid)), @lines - 2,
   '... still waiting: nothing stored since');

$r = $s->wait_done($lid, 300);
is($r->{status}, 'completed', 'the run completes')
    or diag($s->runner_log_tail($runner, 20));
like($s->runner_log($runner), qr/run=$lid.*reconnected: going on after/,
     'the runner read the run\'s state again after reconnecting');
my %back = map { ($_->{dts} . "\0" . $_->{data}) => 1 }
           grep { defined $_->{dts} } $s->stored_events($lid);
is(scalar(grep { $back{ $_->{dts} . "\0" . $_->{data} } } @gone), 2,
   'the two lines taken away are stored again, from the log');
$s->check_events_exact($lid, 'the run whose last events were lost');
# event_bytes: the container's lines and the runner's diff marker
my $sum = 0;
$sum += length($_->{data})
    for grep { defined $_->{dts} || ($_->{json}{step} // '') eq 'diff' }
        $s->stored_events($lid);
is($s->run_hash($lid)->{event_bytes}, $sum,
   'event_bytes: the bytes of the stored lines, none twice');

$s->stop_runner($runner, 'TERM');
$s->done;
