#!/usr/bin/env perl
# The runner's warm pool (--pool N), everything real but the model: redis,
# nginx with the module, the sandbox image, the fake Anthropic, dockerd.
#
#   1. the pool fills to N idle sandboxes, named smcp-pool-*, running; an
#      idle one holds no run token, no task (its environment, its
#      processes' environments, its files)
#   2. a run of a new session takes a pooled sandbox (its container was
#      made before the run) and the pool refills; the session keeps the
#      sandbox's volume: its follow-up (no pool) sees the first run's file
#   3. another new session's run gets another sandbox, and sees nothing of
#      the first run; two runs at once never share one; the first session,
#      expired by the janitor, loses the volume it kept
#   4. an idle sandbox killed is replaced; one handed a run cut short (its
#      entries on stdin without the end) runs nothing, ends, and is
#      replaced; a runner killed leaves its idle ones, removed by the next
#      one of its name, which fills the pool
#   5. a pooled sandbox's volume is labelled (smcp.pool, smcp.store,
#      smcp.managed); the next runner of the name removes such a volume
#      that no container uses and no session names (left without its
#      sandbox), and keeps the sessions' (their workspaces, used by no
#      container between runs) and another store's
#   6. SIGTERM drains the pool: its idle sandboxes and their volumes go
#   7. --pool with --backend swarm is refused at start, saying why (with
#      --egress-container it holds: t/compose.t)
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image ($SMCP_SANDBOX_IMAGE) is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(docker attach_stdin);
use SMCP::Events qw(agent_data);
use SMCP::Metrics qw(scrape_value);
use SMCP::Stack;
use SMCP::Test qw(json_decode json_encode wait_until run_cmd);

my $POOL = 2;

my %SCRIPTS = (
    # leaves a file in the session's workspace
    'SCENARIO-LEAVE' => [
        { tool_use => { name => 'bash', input => {
            command => 'echo KEPT-4d1 > /workspace/repo/left.txt; echo WROTE',
            description => 'Leave a file' } } },
        { text => 'left a file' },
    ],
    # what the workspace holds of earlier runs
    'SCENARIO-LOOK' => [
        { tool_use => { name => 'bash', input => {
            command => 'cat /workspace/repo/left.txt 2>/dev/null || echo ABSENT; '
                       . 'ls -A /workspace | tr "\n" " "; echo',
            description => 'Look for the file' } } },
        { text => 'looked' },
    ],
    # holds its sandbox a while
    'SCENARIO-HOLD' => [
        { tool_use => { name => 'bash', input => {
            command => 'sleep 3; echo HELD', description => 'Hold' } } },
        { text => 'held' },
    ],
);

my $s = SMCP::Stack->new(scripts => \%SCRIPTS);
my $t = $s->t;

# the runner's pooled sandboxes: {id => name}, idle ones only with $idle
sub pooled {
    my ($r, %o) = @_;
    my (undef, $out) = docker('ps', ($o{all} ? '-a' : ()), '--no-trunc',
        '--filter', "label=smcp.pool=$r->{name}", '--format', '{{.ID}} {{.Names}}');
    my %c = map { split ' ', $_, 2 } grep { /\S/ } split /\n/, $out;
    return { map { ($_ => $c{$_}) } grep { !$o{idle} || $c{$_} =~ /^smcp-pool-/ } keys %c };
}

sub container_cfg {
    my ($id) = @_;
    my (undef, $j) = docker('inspect', '--format', '{{json .Config}}', $id);
    return eval { json_decode($j) } || {};
}

sub idle_ids { my @id = sort keys %{ pooled($_[0], idle => 1) }; return @id }

sub full {
    my ($r) = @_;
    return wait_until(60, sub { (() = idle_ids($r)) == $POOL }, 0.2);
}

sub tool_output {
    my ($run) = @_;
    return join "\n", map { $_->{part}{state}{output} // '' }
        grep { ($_->{type} // '') eq 'tool_use' } agent_data($s->events($run));
}

sub run_done {
    my ($r, %args) = @_;
    my ($run) = $s->run_completed($args{title}, $r, %args);
    return ($run, $s->run_hash($run->{runId}));
}

my $mport = $t->free_port;
my $r = $s->start_runner(concurrency => 2, args => ['--pool', $POOL, '--janitor-interval', '1',
                                                    '--metrics', "127.0.0.1:$mport"]);

##############################################################################

subtest 'the pool fills; an idle sandbox holds nothing of a run' => sub {
    ok(full($r), "$POOL idle sandboxes, named smcp-pool-*")
        or diag($s->runner_log_tail($r, 20));
    is(scrape_value($mport, 'smcp_runner_pool_idle'), $POOL, "metrics: smcp_runner_pool_idle $POOL");
    for my $id (idle_ids($r)) {
        my (undef, $env) = docker('inspect', '--format',
                                  '{{range .Config.Env}}{{println .}}{{end}}', $id);
        like($env, qr/^SMCP_POOL=1$/m, "$id: SMCP_POOL=1");
        unlike($env, qr/SMCP_(RUN_TOKEN|TASK|RUN_ID|MODEL)=/, '... no token, task, run in its config');
        my (undef, $ps) = docker('exec', $id, 'sh', '-c',
            'cat /proc/[0-9]*/environ 2>/dev/null | tr "\0" "\n" | grep -c "^SMCP_RUN_TOKEN=" || true');
        is($ps + 0, 0, '... nor in any process environment');
        my (undef, $files) = docker('exec', $id, 'sh', '-c',
            'ls -A /workspace /workspace/repo; grep -rls "eyJ" /workspace /tmp /home/sandbox 2>/dev/null || true');
        # (repo an empty repository, its instance warmed: entrypoint.sh)
        is($files, "/workspace:\n.oc\nrepo\n\n/workspace/repo:\n.git\n",
           '... nor a file in /workspace (OpenCode\'s own dirs, an empty repository), /tmp, $HOME (no JWT anywhere)');
        my (undef, $lbl) = docker('inspect', '--format', '{{index .Config.Labels "smcp.run"}}', $id);
        chomp $lbl;
        is($lbl, '', '... no run label');
    }
};

my ($run_a, $h_a);

subtest 'a new session takes a pooled sandbox; the pool refills' => sub {
    my %before = map { ($_ => 1) } idle_ids($r);
    ($run_a, $h_a) = run_done($r, task => 'SCENARIO-LEAVE: leave a file', title => 'A');
    ok($before{ $h_a->{container_id} // '' }, 'its container was one of the idle ones, made before the run')
        or diag(json_encode([$h_a->{container_id}, [keys %before]]));
    like(tool_output($run_a->{runId}), qr/WROTE/, 'its tool ran in the sandbox');
    like($s->runner_log($r), qr/running in container \w+ \(pooled\)/, 'the runner says so');
    ok(full($r), "refilled to $POOL");
    my %after = map { ($_ => 1) } idle_ids($r);
    ok(!$after{ $h_a->{container_id} }, 'the taken one is not idle again');
    my $ses = $t->redis_hgetall("smcp:session:$run_a->{sessionId}");
    like($ses->{volume} // '', qr/^smcp-pool-[0-9a-f]{16}$/, "the session's volume: the sandbox's");
    ok(wait_until(10, sub { !pooled($r, all => 1)->{ $h_a->{container_id} } }),
       'its container went with the run');
};

subtest "another session sees nothing of the first; the first's follow-up does" => sub {
    my ($run_b, $h_b) = run_done($r, task => 'SCENARIO-LOOK: look', title => 'B');
    isnt($h_b->{container_id}, $h_a->{container_id}, 'another sandbox');
    my $out = tool_output($run_b->{runId});
    like($out, qr/ABSENT/, "the first run's file is not there") or diag($out);
    unlike($out, qr/smcp-(run|ready)/, 'nor the handover files');

    my %idle = map { ($_ => 1) } idle_ids($r);
    my ($run_c, $h_c) = run_done($r, task => 'SCENARIO-LOOK: look again', title => 'A2',
                                 sessionId => $run_a->{sessionId});
    ok(!$idle{ $h_c->{container_id} // '' }, 'the follow-up: a sandbox of its own, not a pooled one');
    like(tool_output($run_c->{runId}), qr/KEPT-4d1/, "the follow-up sees the session's file");
};

subtest "an expired session's pooled volume goes" => sub {
    my $ses = $run_a->{sessionId};
    my $vol = $t->redis_hgetall("smcp:session:$ses")->{volume} // '';
    my (undef, $v) = docker('volume', 'ls', '-q', '--filter', "name=$vol");
    like($v, qr/^\Q$vol\E$/m, "the session's volume $vol is there");
    $t->redis('ZADD', 'smcp:sessions', int(time() * 1000) - 1000, $ses);
    ok(wait_until(30, sub {
        ($t->redis_hgetall("smcp:session:$ses")->{state} // '') eq 'expired' }, 0.2),
       'the janitor expired the session') or diag($s->runner_log_tail($r, 10));
    (undef, $v) = docker('volume', 'ls', '-q', '--filter', "name=$vol");
    unlike($v, qr/\Q$vol\E/, '... and removed its volume');
};

subtest 'two runs at once: two sandboxes' => sub {
    my @runs = map { $s->run_task(task => "SCENARIO-HOLD: hold $_", title => "H$_") } 1, 2;
    my @res = map { $s->wait_done($_->{runId}, 300) } @runs;
    is_deeply([map { $_->{status} } @res], ['completed', 'completed'], 'both completed');
    my @c = map { $s->run_hash($_->{runId})->{container_id} // '' } @runs;
    isnt($c[0], $c[1], 'each in its own sandbox');
    ok(full($r), "refilled to $POOL");
    is(scrape_value($mport, 'smcp_runner_pool_empty_total'), 0,
       'metrics: smcp_runner_pool_empty_total 0 (every new session found one)');
};

subtest 'an idle sandbox killed is replaced' => sub {
    ok(full($r), 'full');
    my ($victim) = idle_ids($r);
    docker('kill', $victim);
    ok(wait_until(30, sub { !pooled($r, all => 1)->{$victim} && (() = idle_ids($r)) == $POOL }, 0.2),
       'removed and replaced') or diag($s->runner_log_tail($r, 20));
    like($s->runner_log($r), qr/stopped while idle: replaced/, 'the runner says so');
};

subtest 'a hand-over cut short starts nothing' => sub {
    ok(full($r), 'full');
    my ($victim) = idle_ids($r);
    my $cfg = container_cfg($victim);
    ok($cfg->{OpenStdin} && $cfg->{StdinOnce}
       && ($cfg->{Labels}{'smcp.handover'} // '') eq 'stdin',
       'an idle one waits for its run on its stdin, open once (OpenStdin, StdinOnce, smcp.handover)');
    my $replaced = () = $s->runner_log($r) =~ /stopped while idle: replaced/g;
    # everything it prints, to its end (followed before the hand-over)
    my $lpid = open(my $logs, '-|', 'sh', '-c', 'exec docker logs --follow "$1" 2>&1', 'sh', $victim) // die "docker logs: $!";
    # a run's entries without the end (an empty entry): as if the runner
    # died writing them, or someone else attached
    is(attach_stdin($victim, "SMCP_TASK=SCENARIO-LOOK: CUT-7f2\0SMCP_RUN_TOKEN=forged\0"
                             . "SMCP_RUN_ID=run_cut\0SMCP_MODEL=anthropic/claude"),
       101, 'attached, a run written without its end, closed');
    my $printed = eval {
        local $SIG{ALRM} = sub { die "timeout\n" };
        alarm 30;
        my $o = join '', <$logs>;
        alarm 0;
        $o;
    } // do { kill 'TERM', $lpid; 'still running after 30 s' };
    close($logs);
    is($printed, '', '... it printed nothing, and ended (no agent_start: no run began)');
    ok(wait_until(30, sub { !pooled($r, all => 1)->{$victim} && (() = idle_ids($r)) == $POOL }, 0.2),
       'it ends, and is removed and replaced') or diag($s->runner_log_tail($r, 20));
    my $now = () = $s->runner_log($r) =~ /stopped while idle: replaced/g;
    is($now, $replaced + 1, '... as one that stopped while idle');
    ok(!grep({ ($_->{body} // '') =~ /CUT-7f2/ } $s->anthropic->requests),
       '... and no agent ran its task (no model request holds it)');
};

subtest 'a runner killed: its idle sandboxes go at the next start' => sub {
    ok(full($r), 'full');
    my @old = idle_ids($r);
    my (undef, $vols) = docker('inspect', '--format', '{{range .Mounts}}{{.Name}} {{end}}', @old);
    my @old_vols = split ' ', $vols;
    $s->stop_runner($r, 'KILL');
    is(scalar(() = idle_ids($r)), $POOL, 'left running by the killed runner');
    $r = $s->start_runner(concurrency => 2, args => ['--pool', $POOL, '--janitor-interval', '1',
                                                    '--metrics', "127.0.0.1:$mport"]);
    ok(wait_until(30, sub { !grep { pooled($r, all => 1)->{$_} } @old }, 0.2),
       "the dead runner's idle sandboxes removed");
    my (undef, $left) = docker('volume', 'ls', '-q');
    my %v = map { ($_ => 1) } split ' ', $left;
    ok(!grep({ $v{$_} } @old_vols), '... and their volumes');
    ok(full($r), "refilled to $POOL");
};

# a volume's labels (undef: no such volume)
sub volume_labels {
    my ($v) = @_;
    my ($rc, $j) = docker('volume', 'inspect', '--format', '{{json .Labels}}', $v);
    return $rc == 0 ? (eval { json_decode($j) } || {}) : undef;
}

sub volume_there { return defined volume_labels($_[0]) }

sub pool_volume_name { return 'smcp-pool-' . join '', map { sprintf '%x', int rand 16 } 1 .. 16 }

subtest "pool volumes labelled; a restart removes one left without its sandbox, never a session's" => sub {
    ok(full($r), 'full');
    my $store = $t->redis('GET', 'smcp:store-id');
    like($store // '', qr/^[0-9a-f]{32}$/, 'the store id');
    my ($idle) = idle_ids($r);
    my (undef, $vol) = docker('inspect', '--format', '{{range .Mounts}}{{.Name}}{{end}}', $idle);
    chomp $vol;
    my $lbl = volume_labels($vol) || {};
    is_deeply([@$lbl{qw(smcp.pool smcp.store smcp.managed)}], [$r->{name}, $store, '1'],
              "an idle sandbox's volume $vol: smcp.pool, smcp.store, smcp.managed")
        or diag(json_encode($lbl));

    # the workspaces of the sessions whose first run took a pooled sandbox
    my @kept;
    for my $k ($t->redis_keys('smcp:session:ses_*')) {
        next unless $k =~ /^smcp:session:ses_[0-9a-f]{24}$/;
        my $h = $t->redis_hgetall($k);
        push @kept, $h->{volume} if ($h->{volume} // '') =~ /^smcp-pool-/ && ($h->{state} // '') ne 'expired';
    }
    ok(@kept >= 2, scalar(@kept) . " sessions' workspaces are pooled volumes");
    my (undef, $unused) = docker('volume', 'ls', '-q', '--filter', 'dangling=true',
                                 '--filter', "label=smcp.pool=$r->{name}", '--filter', "label=smcp.store=$store");
    my %unused = map { ($_ => 1) } split ' ', $unused;
    is(scalar(grep { $unused{$_} } @kept), scalar(@kept),
       '... each labelled as the pool\'s, used by no container')
        or diag(json_encode([\@kept, [sort keys %unused]]));

    # one left by an earlier runner without its sandbox, another store's
    my ($lost, $other) = (pool_volume_name(), pool_volume_name());
    docker('volume', 'create', '--label', "smcp.pool=$r->{name}", '--label', "smcp.store=$store", $lost);
    docker('volume', 'create', '--label', "smcp.pool=$r->{name}",
           '--label', 'smcp.store=0123456789abcdef0123456789abcdef', $other);
    ok(volume_there($lost) && volume_there($other), "made: $lost (ours), $other (another store's)");

    $s->stop_runner($r, 'TERM');
    $r = $s->start_runner(concurrency => 2, args => ['--pool', $POOL, '--janitor-interval', '1',
                                                    '--metrics', "127.0.0.1:$mport"]);
    # (the pool fills once the leftovers went)
    ok(full($r), "refilled to $POOL");
    ok(!volume_there($lost), "$lost removed")
        or diag($s->runner_log_tail($r, 20));
    like($s->runner_log($r), qr/removed volume \Q$lost\E, left without its sandbox/, 'the runner says so');
    is(scalar(grep { volume_there($_) } @kept), scalar(@kept), "the sessions' workspaces kept");
    ok(volume_there($other), "another store's kept");
    docker('volume', 'rm', '-f', $other);
};

subtest 'SIGTERM drains the pool' => sub {
    ok(full($r), 'full');
    my @idle = idle_ids($r);
    my (undef, $vols) = docker('inspect', '--format', '{{range .Mounts}}{{.Name}} {{end}}', @idle);
    $s->stop_runner($r, 'TERM');
    is(scalar(keys %{ pooled($r, all => 1) }), 0, 'no pooled sandbox left');
    my (undef, $left) = docker('volume', 'ls', '-q');
    my %v = map { ($_ => 1) } split ' ', $left;
    ok(!grep({ $v{$_} } split ' ', $vols), 'nor their volumes');
    like($s->runner_log($r), qr/pool: drained/, 'the runner says so');
};

subtest '--pool is refused where it cannot hold' => sub {
    for my $case (['--backend', 'swarm', qr/swarm backend has no warm pool/]) {
        my ($rc, $out, $err) = run_cmd([$s->{runner_bin}, '--pool', '1',
            '--secret-file', $t->secret_file, '--egress-url', 'http://127.0.0.1:1',
            $case->[0], $case->[1]], timeout => 10);
        is($rc, 2, "$case->[0] $case->[1]: exit 2");
        like($err, $case->[2], '... saying why') or diag($err);
    }
};

$s->done;
