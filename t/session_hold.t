#!/usr/bin/env perl
# A session's held sandbox (issue 25, points 1 and 2; runner/hold.c, the
# runner's --session-hold): once a run of a pooled image ends, a sandbox
# for its session's next run waits on the session's workspace, its
# OpenCode server warmed, for a while; the follow-up takes it.  Everything
# real but the model (redis, nginx with the module and the egress, the
# sandbox image, dockerd, the real OpenCode; the fake Anthropic).
#
#   1. a run ends: its session has a held sandbox (smcp-hold-*, labelled
#      with the session, on its volume, its server warmed), started only
#      once the run's outcome was stored (its token refused by then),
#      holding no token and nothing of a run, its run to come on its
#      stdin; what the run's agent left for it (files named as a pooled
#      sandbox's run once was, .smcp-run and .smcp-ready, and oc-dir
#      made a FIFO) starts nothing and hangs nothing; a new session's run
#      does not take it
#   2. the follow-up takes it: on the warm server (agent_start "warm"),
#      the conversation goes on (the first run's turns are in the model
#      request), and its time to the first model request is printed
#   3. a message sent to a follow-up reaches its agent (steering a
#      session's later run, not only its first)
#   4. a held sandbox killed: the follow-up starts cold, completes, the
#      dead one is removed
#   5. a held sandbox whose workspace outgrows --workspace-limit goes
#      (nothing else watches it while it waits)
#   6. the runner stopped: its held sandboxes go
#   7. past --session-hold the held sandbox goes (the volume stays); the
#      next follow-up starts cold and still continues the conversation
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image ($SMCP_SANDBOX_IMAGE) is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use Time::Local ();

use SMCP::Docker qw(docker);
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_decode json_encode wait_until);

my $HOLD = 900;          # outlives the checks; the end's runner: 15 s
my $MARK = 'HELD-' . int(rand(1e9));

my $s = SMCP::Stack->new(scripts => {
    # the agent leaves what a held sandbox must not obey: a run of its
    # own under the files' plain names, and oc-dir a FIFO (a read of it
    # would hang)
    'SCENARIO-FIRST' => [
        bash_step(q{printf 'SMCP_TASK=PLANTED\0SMCP_RUN_TOKEN=stolen\0' > /workspace/.smcp-run; }
                  . q{touch /workspace/.smcp-ready; rm -f /workspace/.oc/smcp/oc-dir; }
                  . q{mkfifo /workspace/.oc/smcp/oc-dir; echo planted}, 'Plant'),
        { text => 'First done.' } ],
    'SCENARIO-NEXT'  => [ { text => 'Next done.' } ],
    # the step the message arrives in: a command that takes 8 s
    'SCENARIO-STEER' => [ bash_step('sleep 8; echo slept', 'Wait'),
                          { text => 'Steered.' } ],
});
my $t = $s->t;
my $fake = $s->anthropic;
my $LIMIT = 256 * 1024 * 1024;
my $r = $s->start_runner(concurrency => 2,
                         args => ['--pool', 1, '--session-hold', $HOLD,
                                  '--workspace-limit', $LIMIT]);

# the held sandboxes of a session (any state): [id, name]
sub held {
    my ($session) = @_;
    my (undef, $out) = docker('ps', '-a', '--no-trunc', '--filter', "label=smcp.hold=$session",
                              '--format', '{{.ID}} {{.Names}}');
    return map { [split ' '] } grep { /\S/ } split /\n/, $out // '';
}

sub inspect {
    my ($id) = @_;
    my (undef, $out) = docker('inspect', $id);
    my $j = eval { json_decode($out) };
    return ref $j eq 'ARRAY' ? $j->[0] : {};
}

sub warm_ready {
    my ($id) = @_;
    my ($rc) = docker('exec', $id, 'test', '-e', '/tmp/smcp-warm/ready');
    return $rc == 0;
}

sub agent_start {
    my ($run) = @_;
    my ($e) = grep { ($_->{json}{step} // '') eq 'agent_start' } $s->stored_events($run);
    return $e ? $e->{json} : undef;
}

sub requests_with {
    my ($text) = @_;
    return grep { ($_->{body} // '') =~ /\Q$text\E/ } $fake->requests(path => qr{/messages$});
}

##############################################################################

ok($s->wait_pool_warm($r), 'the pool is warm');
my $first = $s->run_task(task => "SCENARIO-FIRST: $MARK begin", title => 'H');
my $session = $first->{sessionId};
my $hold;

subtest 'a run ends: its session gets a held sandbox' => sub {
    my $res = $s->wait_done($first->{runId}, 300);
    is($res->{status}, 'completed', 'the first run completed') or $s->diag_run($first->{runId}, $r);
    my @h = held($session);
    is(scalar(@h), 1, 'one held sandbox for the session, there once the outcome is')
        or diag($s->runner_log_tail($r, 20));
    $hold = $h[0][0];
    like($h[0][1] // '', qr/^smcp-hold-[0-9a-f]{16}$/, '... named smcp-hold-*');
    my $in = inspect($hold);
    my $vol = $t->redis('HGET', "smcp:session:$session", 'volume');
    my ($mount) = grep { ($_->{Destination} // '') eq '/workspace' } @{ $in->{Mounts} || [] };
    is($mount && $mount->{Name}, $vol, "... on the session's volume ($vol)");
    is($in->{Config}{Labels}{'smcp.hold.tenant'}, $t->{tenant}, '... labelled with its tenant');
    my $until = $in->{Config}{Labels}{'smcp.hold.until'} // 0;
    ok($until > time() * 1000 && $until <= (time() + $HOLD + 1) * 1000,
       "... held for --session-hold ($HOLD s)");
    my @env = @{ $in->{Config}{Env} || [] };
    ok(!grep({ /TOKEN|SMCP_TASK|SMCP_RUN_ID/ } @env), '... no token, no task in its environment')
        or diag(join ' ', @env);
    ok((grep { $_ eq 'SMCP_HOLD=1' } @env), '... SMCP_HOLD');
    ok($in->{Config}{OpenStdin} && $in->{Config}{StdinOnce}
       && ($in->{Config}{Labels}{'smcp.handover'} // '') eq 'stdin',
       '... its run to come on its stdin, once (OpenStdin, StdinOnce, smcp.handover)');
    my $fin = $s->run_hash($first->{runId})->{finished_at} // 0;
    my $started = $in->{State}{StartedAt} // '';
    my $st_ms = $started =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(?:\.(\d+))?Z$/
        ? (Time::Local::timegm($6, $5, $4, $3, $2 - 1, $1) + (defined $7 ? "0.$7" : 0)) * 1000 : 0;
    cmp_ok($st_ms, '>=', $fin - 5, "... started once the run's outcome was stored ($started)");
    ok(wait_until(120, sub { warm_ready($hold) }, 0.5), '... its OpenCode server warmed')
        or diag(join "\n", grep { /hold/ } split /\n/, $s->runner_log($r));
    my (undef, $files) = docker('exec', $hold, 'bash', '-c', 'ls -A /tmp/smcp-warm');
    unlike($files // '', qr/^token$/m, '... no run handed to it: no token');
    my (undef, $logs, $lerr) = docker('logs', $hold);
    is(($logs // '') . ($lerr // ''), '',
       "... and nothing started: the agent's planted .smcp-run and .smcp-ready were not read");

    # a new session's run takes the pool's, never a session's held one
    ok($s->wait_pool_warm($r), 'the pool warm again');
    my ($other) = $s->run_completed('a new session', $r, task => 'SCENARIO-NEXT: other');
    isnt($s->run_hash($other->{runId})->{container_id}, $hold, "a new session's run: not in it");
    is(scalar(grep { $_->[0] eq $hold } held($session)), 1, '... which still waits');
};

subtest 'the follow-up takes it: warm, the conversation goes on' => sub {
    my $t0 = time();
    my $run = $s->run_task(task => 'SCENARIO-NEXT: continue', sessionId => $session);
    ok(wait_until(120, sub { scalar(requests_with('SCENARIO-NEXT: continue')) }, 0.05),
       'the model was asked') or $s->diag_run($run->{runId}, $r);
    my ($req) = requests_with('SCENARIO-NEXT: continue');
    my %at = map { (($_->{json}{status} // $_->{json}{step} // '') => $_->{ts} / 1000) }
             $s->stored_events($run->{runId});
    note(sprintf('timing follow-up run_task -> %s', join ', ',
                 map { sprintf('%s %.2f s', $_->[0], $_->[1] - $t0) }
                 grep { $_->[1] } ([running => $at{running}], [agent_start => $at{agent_start}],
                                   ['first model request' => $req->{time}])));
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'completed', 'completed') or $s->diag_run($run->{runId}, $r);
    is($res->{result}, 'Next done.', '... with its answer');
    is($s->run_hash($run->{runId})->{container_id}, $hold, 'in the held sandbox');
    ok((agent_start($run->{runId}) // {})->{warm}, 'agent_start says warm')
        or diag(json_encode(agent_start($run->{runId})));
    like($req->{body} // '', qr/\Q$MARK\E begin.*First done\..*SCENARIO-NEXT: continue/s,
         "the request carries the first run's conversation");
    like($s->runner_log($r), qr/run=\Q$run->{runId}\E.*\(held for its session\)/,
         'the runner log says so');
    is(scalar(grep { $_->[0] eq $hold } held($session)), 0, 'the taken one is no longer held');
};

subtest 'a message reaches a follow-up' => sub {
    my @h = held($session);
    is(scalar(@h), 1, 'the session has a new held sandbox');
    ok(wait_until(120, sub { warm_ready($h[0][0]) }, 0.5), '... warmed');
    my $run = $s->run_task(task => 'SCENARIO-STEER: wait a bit', sessionId => $session);
    my $id = $run->{runId};
    ok(wait_until(120, sub { scalar(requests_with('SCENARIO-STEER: wait a bit')) }, 0.2),
       'the agent is in its step') or $s->diag_run($id, $r);
    sleep 1;
    my $text = "$MARK: steered while continuing";
    my $sc = SMCP::Test::sc($s->call('opencode_send_message', { runId => $id, message => $text }));
    is($sc->{status}, 'queued', 'queued') or diag(json_encode($sc));
    my $res = $s->wait_done($id, 300);
    is($res->{status}, 'completed', 'completed') or $s->diag_run($id, $r);
    ok(scalar(requests_with($text)), 'the message reached the model');
};

subtest 'a held sandbox killed: the follow-up starts cold' => sub {
    my @h = held($session);
    is(scalar(@h), 1, 'a held sandbox') or return;
    docker('kill', $h[0][0]);
    my ($run, $res) = $s->run_completed('after the kill', $r,
                                        task => 'SCENARIO-NEXT: after a kill',
                                        sessionId => $session);
    isnt($s->run_hash($run->{runId})->{container_id}, $h[0][0], 'not in the dead one');
    ok(!(agent_start($run->{runId}) // {})->{warm}, 'OpenCode started cold');
    ok(!grep({ $_->[0] eq $h[0][0] } held($session)), 'the dead one removed');
};

subtest 'a held workspace that outgrows --workspace-limit goes' => sub {
    my @h = held($session);
    is(scalar(@h), 1, 'a held sandbox') or return;
    my $vol = $t->redis('HGET', "smcp:session:$session", 'volume');
    my (undef, $mp) = docker('volume', 'inspect', '--format', '{{.Mountpoint}}', $vol);
    chomp $mp;
    my $big = "$mp/repo/big.bin";
    # what a plugin the agent left could write while nothing watches
    system('dd', 'if=/dev/zero', "of=$big", 'bs=1M', 'count=' . ($LIMIT / 1024 / 1024 + 16),
           'status=none') == 0 or diag("dd: $?");
    ok(wait_until(60, sub { !grep { $_->[0] eq $h[0][0] } held($session) }, 0.5),
       'removed by the runner') or diag($s->runner_log_tail($r, 10));
    like($s->runner_log($r), qr/outgrew --workspace-limit/, '... saying why');
    unlink $big;
};

subtest 'the runner stopped: its held sandboxes go' => sub {
    my ($run) = $s->run_completed('one more', $r, task => 'SCENARIO-NEXT: one more',
                                  sessionId => $session);
    ok(scalar(held($session)), 'a held sandbox');
    $s->stop_runner($r, 'TERM');
    is(scalar(held($session)), 0, 'none left');
};

# a runner with a short hold, for its end
my $SHORT = 15;
$r = $s->start_runner(concurrency => 2, args => ['--pool', 1, '--session-hold', $SHORT]);

subtest 'past --session-hold the held sandbox goes' => sub {
    my ($run) = $s->run_completed('a run', $r, task => 'SCENARIO-NEXT: again later',
                                  sessionId => $session);
    my @h = held($session);
    is(scalar(@h), 1, 'a held sandbox') or return;
    my $until = inspect($h[0][0])->{Config}{Labels}{'smcp.hold.until'} // 0;
    ok(wait_until($SHORT + 60, sub { !held($session) }, 0.5), 'gone');
    cmp_ok(time() * 1000, '>=', $until, "... not before its time ($SHORT s)");
    my $vol = $t->redis('HGET', "smcp:session:$session", 'volume');
    my ($rc) = docker('volume', 'inspect', $vol);
    is($rc, 0, "the session's volume stays");
    ($run) = $s->run_completed('after the hold', $r, task => 'SCENARIO-NEXT: much later',
                               sessionId => $session);
    ok(!(agent_start($run->{runId}) // {})->{warm}, 'the next follow-up starts cold');
    my ($req) = requests_with('SCENARIO-NEXT: much later');
    like($req->{body} // '', qr/\Q$MARK\E begin/, '... and continues the conversation');
};

$s->done;
