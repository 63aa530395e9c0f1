#!/usr/bin/env perl
# Redis that fails over (issue 24, point 2): the module and the runner
# given sentinel://... (one master, one replica, three sentinels on
# loopback: SMCP::Sentinel) find the master through the sentinels and
# follow a failover.
#
#   1. the master killed (-9) in the middle of three runs (each waiting on
#      the model between two steps, what they wrote before replicated):
#      the sentinels promote the replica; /mcp answers again within
#      seconds (figure printed); every run still completes, its events
#      exactly the script's (none lost, none twice); a run started after
#      the failover completes; nothing acknowledged before the kill is
#      missing (the runs, their sessions, the MCP session)
#   2. the old master back: the sentinels make it a replica; then a
#      manual failover (SENTINEL FAILOVER) while a run is under way: the
#      old master stays up, a master until Sentinel reaches it (up to
#      ten seconds), and what it takes meanwhile is gone when it resyncs.
#      nginx and the runner hear the switch (+switch-master) and connect
#      again at once: the run completes with every event (before this,
#      two of its steps were lost in one try of three), a new one too
#   3. the log lines say where each connection went (nginx's error.log:
#      "sentinel ... names ..."), and that the switch was heard
#   4. the tools: smcp-token --revoke through sentinel://, and a bad
#      sentinel:// setting refused by nginx -t and the runner, saying why
#
# Needs root, Docker, `make` and redis-server (its --sentinel mode).
# Traffic stays on loopback and the test's sandbox network.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack;
use SMCP::Test qw(wait_until run_cmd);

my $s = SMCP::Stack->new(redis_appendonly => 1, sentinel => 1, scripts => {
    # the second step's answer 60 s late: the run waits on the model while
    # the master dies and the replica takes over (three OpenCode servers
    # starting at once on a loaded machine reach their first steps tens of
    # seconds apart)
    'SCENARIO-FAIL' => SMCP::Stack::four_steps('FAIL', 60, 1),
    'SCENARIO-MANUAL' => SMCP::Stack::four_steps('MANUAL', 12, 1),
    'SCENARIO-QUICK' => [ { text => 'quick answer' } ],
});
my $t = $s->t;
my $sen = $s->sentinel;
my $runner = $s->start_runner(concurrency => 4);

my $first = $sen->master_port;
is($first, $t->redis_port, 'the sentinels name the test\'s Redis the master');

# the run has stored its first step's end: it waits on the model (the
# second answer, held)
sub waits_on_model {
    my ($id) = @_;
    return scalar grep { $_->{type} eq 'agent' && ($_->{json}{type} // '') eq 'step_finish' }
                       $s->stored_events($id);
}

###############################################################################
# 1. the master killed in the middle of three runs

my @runs = map { $s->run_task(task => "SCENARIO-FAIL: run $_") } 1 .. 3;
ok(wait_until(180, sub {
    (grep { ($s->run_hash($_->{runId})->{status} // '') eq 'running' } @runs) == 3
}, 0.3), 'three runs running') or $s->diag_run($runs[0]{runId}, $runner);

# each has finished its first step and waits on the model
if (!ok(wait_until(300, sub { (grep { waits_on_model($_->{runId}) } @runs) == 3 }, 0.3),
        'each run waits on the model for its second step')) {
    $s->diag_run($_->{runId}, $runner) for grep { !waits_on_model($_->{runId}) } @runs;
}

ok($sen->wait_replicas($first, 1, 30),
   'what was written is on the replica (its offset is the master\'s)');
my %before = map { $_->{runId} => scalar(() = $s->stored_events($_->{runId})) } @runs;

my $t_kill = time();
$t->stop_redis(signal => 'KILL');
my $second = $sen->wait_master(not => $first, timeout => 60);
ok($second, "the sentinels promoted the replica (port $second)")
    or SMCP::Test::give_up('no failover');
my $t_promoted = time();
$s->timing('master killed -> replica promoted', $t_promoted - $t_kill);
$t->redis_at($second);

# /mcp answers again: a read and a write (a new run) go through
my $quick;
ok(wait_until(30, sub { $quick = eval { $s->run_task(task => 'SCENARIO-QUICK: after') } }, 0.1),
   '/mcp takes a new run after the failover');
my $answered = time() - $t_promoted;
$s->timing('promoted -> /mcp takes a run', $answered);
cmp_ok($answered, '<', 15, sprintf('... within seconds (%.1f s)', $answered));

for my $r (@runs) {
    my $res = $s->wait_done($r->{runId}, 240);
    is($res->{status}, 'completed', "$r->{runId}: completed across the failover")
        or $s->diag_run($r->{runId}, $runner);
    $s->check_events_exact($r->{runId}, "$r->{runId}: events");
    cmp_ok(scalar(() = $s->stored_events($r->{runId})), '>=', $before{ $r->{runId} },
           '... none of those stored before the kill missing');
}
my $qres = $s->wait_done($quick->{runId}, 240);
is($qres->{status}, 'completed', 'the run started after the failover completes');
is($qres->{result}, 'quick answer', '... with its answer');
is(scalar(grep { $t->redis('EXISTS', "smcp:session:$_->{sessionId}") } @runs), 3,
   'the sessions acknowledged before the kill are all there');
is($s->result($runs[0]{runId})->{status}, 'completed',
   '... and the MCP session made before the kill (it still answers)');

###############################################################################
# 2. the old master back as a replica; a manual failover under a run

$sen->restart($first);
ok($sen->wait_replicas($second, 1, 60),
   'the old master is back as the new master\'s replica, in sync');

my $m = $s->run_task(task => 'SCENARIO-MANUAL: across a switch');
ok(wait_until(180, sub { waits_on_model($m->{runId}) }, 0.3),
   'a run waits on the model for its second step');
ok($sen->wait_replicas($second, 1, 30), '... what it wrote replicated');
ok($sen->wait_replica_known($first, 60),
   '... and every sentinel sees it as a healthy replica');
my $t_switch = time();
# a sentinel may still be vetting the replica: a failover it aborts (no
# good replica) is asked for again
my $third;
for my $try (1 .. 3) {
    ok($sen->failover, "SENTINEL FAILOVER accepted (try $try)") or next;
    $third = $sen->wait_master(not => $second, timeout => 25) and last;
}
is($third, $first, 'the old master is the master again')
    or SMCP::Test::give_up('no manual failover');
$t->redis_at($third);
$s->timing('SENTINEL FAILOVER -> switched', time() - $t_switch);

my $mres = $s->wait_done($m->{runId}, 240);
is($mres->{status}, 'completed', 'the run under the switch completes')
    or $s->diag_run($m->{runId}, $runner);
$s->check_events_exact($m->{runId}, 'the run under the switch: events');
my ($q2) = $s->run_completed('a run after the switch', $runner,
                             task => 'SCENARIO-QUICK: after the switch');

###############################################################################
# 3. the logs say where each connection went

my $elog = SMCP::Test::slurp($t->dir . '/error.log');
like($elog, qr/sentinel 127\.0\.0\.1:\d+ names "127\.0\.0\.1:$second" the master "smcp"/,
     'nginx: a sentinel named the promoted replica');
like($elog, qr/sentinel 127\.0\.0\.1:\d+ names "127\.0\.0\.1:$first" the master "smcp"/,
     'nginx: ... and the old master again after the switch');
like($elog, qr/sentinel 127\.0\.0\.1:\d+: the master "smcp" moved to 127\.0\.0\.1:$first: connecting again/,
     'nginx: the switch heard on +switch-master');
like($s->runner_log($runner), qr/the master \\?"smcp\\?" moved to 127\.0\.0\.1:$first/,
     'the runner: the switch heard on +switch-master');

###############################################################################
# 4. the tools, and bad settings

my $jti = 'sentinel' . SMCP::Test::rhex(8);
my ($rc, $out, $err) = run_cmd([SMCP::Test::token_tool_path(), '--revoke',
                                $t->token(jti => $jti), '--redis', $sen->addr],
                               timeout => 30);
is($rc, 0, 'smcp-token --revoke through sentinel://') or diag($err);
ok(defined $t->redis('HGET', 'smcp:revoked', $jti), '... written on the master');

for my $bad (['sentinel://127.0.0.1:1,/smcp', qr/a bad sentinel address/],
             ['sentinel://127.0.0.1:1/bad name', qr/master's name/]) {
    my ($rrc, undef, $rerr) = run_cmd([$s->{runner_bin}, '--redis', $bad->[0],
                                       '--secret-file', $t->secret_file], timeout => 30);
    is($rrc, 2, "runner --redis '$bad->[0]': refused (exit 2)");
    like($rerr, $bad->[1], '... saying why');

    my $bdir = $t->dir . '/bad-conf';
    mkdir $bdir;
    SMCP::Test::spew("$bdir/nginx.conf", $t->render_conf(dir => $bdir, port => $t->free_port,
                                                         redis_addr => "'$bad->[0]'"));
    my ($nrc, undef, $nerr) = run_cmd([$t->{nginx_bin}, '-t', '-p', "$bdir/", '-c',
                                       "$bdir/nginx.conf", '-e', "$bdir/error.log"]);
    isnt($nrc, 0, "nginx -t, sandbox_mcp_redis $bad->[0]: refused");
    like($nerr, qr/\[emerg\].*invalid redis address.*$bad->[1]/, '... saying why');
}

$s->done;
