#!/usr/bin/env perl
# The limits the runner enforces, end to end (t/runner.t has the setup's
# story: MCP through nginx, build/smcp-runner, dockerd, the sandbox image
# with the real OpenCode; only the model and GitHub are fakes).  The limits
# come from where users set them: nginx's sandbox_mcp_max_running 1,
# sandbox_mcp_retention 300s, sandbox_mcp_session_idle 1h, and run_task's
# maxCostUsd; only "a session is due now" is forced (its `sessions` score):
#
#   1. max_running 1: three runs of the tenant queued at once, a runner
#      with room for three: they run one after the other; the tenant's
#      started and claimed sets are empty at the end
#   2. maxCostUsd 0.2: the model's usage costs $0.45 a step:
#      the sandbox is stopped, the run `failed` naming the cap and the cost
#   3. the finish: a run renaming a file (git mv) and editing it gets
#      filesChanged with the new path, diff_stat, and diff_index with the
#      section under the old and the new path (get_diff finds it by
#      either); its keys expire after its
#      `retention`; its session's `sessions` score is last_active + idle_ttl
#   4. --workspace-limit 50m: a run writing 80 MB into its workspace is
#      stopped, `failed` naming the limit
#   5. the janitor (--janitor-interval, two runners at once): a session due
#      in `sessions` with a run going is left alone; once its run ended,
#      and for an idle one, the volume goes, the session is `expired` once
#      (one runner's log says so), its keys live its `retention`
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Events qw(step_totals);
use SMCP::Stack;
use SMCP::Test qw(json_decode wait_until);

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-ONE' => [ { text => 'One done.', hang => 4 } ],
        'SCENARIO-COST' => [
            { tool_use => { name => 'bash', input => { command => 'echo costly',
                                                       description => 'Spend' } },
              usage => { input_tokens => 150000, output_tokens => 10 } },
            { hang => 150 },
        ],
        'SCENARIO-DISK' => [
            { tool_use => { name => 'bash', input => {
                command => 'dd if=/dev/zero of=/workspace/repo/big.bin bs=1M count=80 '
                           . '2>/dev/null; echo wrote', description => 'Fill' } } },
            { hang => 150 },
        ],
        'SCENARIO-RENAME' => [
            { tool_use => { name => 'bash', input => {
                command => 'git mv README.md DOCS.md && echo more >> DOCS.md',
                description => 'Rename' } } },
            { tool_use => { name => 'write', input => {
                filePath => '/workspace/repo/new.txt', content => "new\n" } } },
            { text => 'Renamed.' },
        ],
    },
    repos => { 'owner/repo' => { 'README.md' => "# Demo\n", 'keep.txt' => "k\n" } },
    location => 'sandbox_mcp_max_running 1; sandbox_mcp_retention 300s; '
              . 'sandbox_mcp_session_idle 1h;',
);
my $t = $s->t;
my $tenant = $t->tenant;

##############################################################################
# 1. the tenant's running limit

my @one = map { $s->run_task(task => "SCENARIO-ONE: run $_", title => "one $_") } 1 .. 3;
my @RUNNER_ARGS = ('--workspace-limit', '50m', '--janitor-interval', '2');
my $runner = $s->start_runner(concurrency => 3, args => \@RUNNER_ARGS);

subtest 'max_running 1: one run at a time' => sub {
    my $t0 = time();
    my ($max, %seen) = (0);
    wait_until(360, sub {
        my @st = map { $s->run_hash($_->{runId})->{status} // '' } @one;
        my $n = grep { $_ eq 'running' } @st;
        $max = $n if $n > $max;
        return !grep { !SMCP::Stack::terminal($_) } @st;
    }, 0.1);
    $s->timing('max_running 1: three runs done', time() - $t0);
    is($max, 1, 'never more than one running');
    my @h = map { $s->run_hash($_->{runId}) } @one;
    is_deeply([map { $_->{status} } @h], [qw(completed completed completed)], 'all completed')
        or do { $s->diag_run($_->{runId}, $runner) for @one };
    my @order = sort { $a->{started_at} <=> $b->{started_at} } @h;
    ok($order[1]{started_at} >= $order[0]{finished_at}
       && $order[2]{started_at} >= $order[1]{finished_at},
       'each started after the one before finished');
    is_deeply([map { $t->redis('SCARD', "smcp:tenant:$tenant:$_") } qw(started claimed)], [0, 0],
              'the tenant\'s started and claimed sets are empty again');
    is_deeply([map { $t->redis('EXISTS', "smcp:session:$_->{sessionId}:active") } @one],
              [0, 0, 0], '... and so are the sessions\' active sets');
};

##############################################################################
# 2 and 3 at once

my $cost = $s->run_task(task => 'SCENARIO-COST: spend', title => 'cost', timeoutSeconds => 120,
                        maxCostUsd => 0.2);
my $ren = $s->run_task(task => 'SCENARIO-RENAME: rename README.md',
                       repository => 'https://github.com/owner/repo', title => 'rename');

subtest 'maxCostUsd: the sandbox is stopped' => sub {
    my $id = $cost->{runId};
    my $r = $s->wait_done($id, 300);
    is($r->{status}, 'failed', 'failed') or $s->diag_run($id, $runner);
    like($r->{error} // '', qr/spend cap exceeded: the run has cost \$0\.4\d+, over its maxCostUsd of \$0\.20+/,
         'the error names the cost and the cap: ' . ($r->{error} // 'null'));
    my (undef, undef, $spent) = step_totals(map { $_->{json} } $s->stored_events($id));
    ok($spent > 0.2 && abs(($r->{cost} // 0) - $spent) < 1e-5,
       "cost $r->{cost}: the sum over the stored step_finish events ($spent)");
    my @req = grep { ($_->{body} // '') =~ /SCENARIO-COST/ } $s->anthropic->requests;
    ok(@req <= 2, 'the model was asked at most twice (' . scalar(@req) . ')');
    ok(wait_until(20, sub { !$s->run_containers($id) }), 'the container is removed');
    my $fin = $s->run_hash($id)->{finished_at} / 1000;
    my ($die) = grep { $_->{action} eq 'die' } $s->docker_events(run => $id);
    ok($die && $die->{time} <= $fin + 0.001, 'the sandbox died before the run was marked failed');
};

subtest 'the finish: diff_index, retention, the session\'s expiry' => sub {
    my $id = $ren->{runId};
    my $r = $s->wait_done($id, 300);
    is($r->{status}, 'completed', 'completed') or $s->diag_run($id, $runner);
    my $h = $s->run_hash($id);
    my $diff = $t->redis('GET', "smcp:run:$id:diff") // '';
    my $idx = json_decode($h->{diff_index} // '') || {};
    is_deeply([sort keys %$idx], [qw(DOCS.md README.md new.txt)],
              'diff_index: the new file, the renamed one under both paths')
        or diag("diff_index $h->{diff_index}\n$diff");
    is_deeply($idx->{'README.md'}, $idx->{'DOCS.md'}, '... the same section for both');
    my ($off, $len) = @{ $idx->{'DOCS.md'} || [0, 0] };
    my $sec = substr($diff, $off, $len);
    like($sec, qr{\Adiff --git a/README\.md b/DOCS\.md\n}, 'the section starts with its header');
    like($sec, qr/^\+more$/m, '... and holds the change');
    unlike($sec, qr/new\.txt/, '... and nothing of the other file');
    my ($o2, $l2) = @{ $idx->{'new.txt'} || [0, 0] };
    is(substr($diff, $o2, $l2), substr($diff, $o2), 'new.txt: the last section, to the end')
        if $o2 > $off;
    is_deeply([sort map { $_->{path} } @{ $r->{filesChanged} }], [qw(DOCS.md new.txt)],
              'filesChanged: the new paths');
    my ($fd) = grep { $_->{path} eq 'DOCS.md' } @{ $r->{filesChanged} };
    is_deeply($fd, { path => 'DOCS.md', additions => 1, deletions => 0 },
              'filesChanged: the renamed file, +1');
    is($h->{diff_stat}, '2 files changed, 2 insertions(+)', 'diff_stat: git\'s wording');
    is($r->{diffStat}, $h->{diff_stat}, '... returned as diffStat');
    for my $p (qw(DOCS.md README.md)) {
        my $g = SMCP::Test::sc($s->call('opencode_get_diff', { runId => $id, path => $p }));
        is($g->{diff}, $sec, "get_diff with path $p (the rename's "
           . ($p eq 'DOCS.md' ? 'new' : 'old') . " path): its section")
            or diag(json_encode($g));
    }
    # the run may have ended minutes before this check (a loaded machine):
    # its keys expire retention seconds after its finish, not after now
    for my $k ("run:$id", "run:$id:events", "run:$id:diff") {
        my $ttl = $t->redis('TTL', "smcp:$k");
        my $at = time() + $ttl - $h->{finished_at} / 1000;
        ok($ttl > 0 && $ttl <= 300 && abs($at - 300) < 5,
           sprintf('%s expires after retention 300 (%d s left, %.1f s after the finish)',
                   $k, $ttl, $at));
    }
    my $ses = $t->redis_hgetall("smcp:session:$ren->{sessionId}");
    ok($ses->{last_active} && $ses->{last_active} >= $h->{finished_at},
       'session: last_active, at the finish');
    is($t->redis('ZSCORE', 'smcp:sessions', $ren->{sessionId}), $ses->{last_active} + 3600 * 1000,
       'sessions: scored last_active + idle_ttl');
    ok(!$t->redis('SISMEMBER', "smcp:tenant:$tenant:claimed", $id)
       && !$t->redis('SISMEMBER', "smcp:tenant:$tenant:started", $id)
       && !defined $t->redis('ZSCORE', "smcp:session:$ren->{sessionId}:active", $id),
       'the run left the tenant\'s sets and its session\'s active set');
};

##############################################################################
# 4. the workspace limit (and a session due while its run goes on)

my $disk = $s->run_task(task => 'SCENARIO-DISK: fill the workspace', title => 'disk',
                        timeoutSeconds => 120);
$t->redis('ZADD', 'smcp:sessions', int(time() * 1000) - 1000, $disk->{sessionId});

subtest '--workspace-limit 50m: 80 MB written' => sub {
    my $id = $disk->{runId};
    my $r = $s->wait_done($id, 300);
    is($r->{status}, 'failed', 'failed') or $s->diag_run($id, $runner);
    like($r->{error} // '', qr/workspace limit exceeded: .*more than 52428800 bytes/,
         'the error names the limit: ' . ($r->{error} // 'null'));
    my $h = $s->run_hash($id);
    note(sprintf('stopped %.1f s after it started', ($h->{finished_at} - $h->{started_at}) / 1000));
    ok(wait_until(20, sub { !$s->run_containers($id) }), 'the container is removed');
    like($s->runner_log($runner), qr/run=\Q$id\E.*workspace limit exceeded/, 'runner log');
    unlike($s->runner_log($runner), qr/janitor: session \Q$disk->{sessionId}\E expired.*\n(?s:.*)run=\Q$id\E.*running in container/,
           'the janitor did not expire the session before its run went');
};

##############################################################################
# 5. the janitor, two runners at once

subtest 'the janitor' => sub {
    my $t0 = time();
    my $r2 = $s->start_runner(name => $s->runner_name . '-b', concurrency => 1,
                              args => ['--janitor-interval', '1']);
    my $idle = $one[0]{sessionId};
    my (undef, $v) = SMCP::Docker::docker('volume', 'ls', '-q', '--filter', "name=smcp-$idle");
    like($v, qr/smcp-\Q$idle\E/, 'an idle session with its volume');
    # both due now: the disk run's finish moved its session's expiry to
    # last_active + idle_ttl (1h)
    $t->redis('ZADD', 'smcp:sessions', int(time() * 1000) - 1000, $_)
        for $idle, $disk->{sessionId};
    for my $ses ($idle, $disk->{sessionId}) {
        ok(wait_until(30, sub {
            ($t->redis_hgetall("smcp:session:$ses")->{state} // '') eq 'expired' }, 0.2),
           "session $ses expired") or diag($s->runner_log_tail($runner, 10));
        my (undef, $vol) = SMCP::Docker::docker('volume', 'ls', '-q', '--filter', "name=smcp-$ses");
        unlike($vol, qr/\Q$ses\E/, '... its volume is gone');
        my $ttl = $t->redis('TTL', "smcp:session:$ses");
        ok($ttl > 280 && $ttl <= 300, "... its keys live its retention ($ttl s)");
        is($t->redis('ZSCORE', 'smcp:sessions', $ses), undef, '... out of sessions');
        my $logs = $s->runner_log($runner) . $s->runner_log($r2);
        my $n = () = $logs =~ /janitor: session \Q$ses\E expired/g;
        is($n, 1, '... expired once, by one of the two runners');
        my $res = $s->call('opencode_run_task', { task => 'go on', sessionId => $ses });
        ok($res->{isError} && SMCP::Test::result_text($res) =~ /Session expired/,
           '... and a run in it is refused: ' . (SMCP::Test::result_text($res) // ''));
    }
    $s->timing('janitor: two sessions expired', time() - $t0);
    my $other = $one[1]{sessionId};
    is($t->redis_hgetall("smcp:session:$other")->{state}, undef,
       'a session not due is left alone');
    ok($s->runner_alive($r2), 'the second runner is up');
    $s->stop_runner($r2, 'TERM');
};

##############################################################################

ok($s->runner_alive($runner), 'the runner is still up');
my @bad = grep { /level=(error|crit)/ } split /\n/, $s->runner_log($runner);
is(scalar(@bad), 0, 'no error in the runner log') or diag(join "\n", @bad);
$s->stop_runner($runner, 'TERM');
$s->done;
