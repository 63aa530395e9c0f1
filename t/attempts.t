#!/usr/bin/env perl
# Attempts (issue 26, point 1) end to end: opencode_run_task with
# attempts runs one task N times side by side, each in a new session and
# sandbox of its own.  Everything real but the model and GitHub (redis,
# nginx with the module, the runner, the sandbox image, dockerd, the real
# OpenCode; the fakes of t/lib/SMCP/Fakes.pm).
#
#   1. three attempts of a task on acme/app (createPullRequest, draft):
#      three runs in three sessions and three sandboxes, at once; each
#      writes its own attempt.txt (its sandbox's name in it), pushes its
#      branch opencode/<runId> and opens a draft pull request; main
#      untouched; opencode_get_result on the second lists the three, each
#      completed with its diffStat, cost and pull request, as their own
#      results say
#   2. a pull request for the attempt picked alone (createPullRequest, no
#      draft): both attempts push their branch and open none;
#      opencode_pick_attempt on the second: a run without a sandbox opens
#      the pull request of its branch (no draft, the run's title), the
#      attempt's pullRequestUrl is it, the other has none; a second pick
#      is refused; a pick run the runner fails before it tries (the tenant
#      over its bytes budget) undoes the pick, and so does one cancelled
#      while its runner took it up; one whose runner is killed while
#      GitHub opens the pull request is taken up by the runner started
#      again, which finds that pull request (none opened twice); one
#      whose pull request was opened and written down before ends with
#      it (a cancel since notwithstanding); with GitHub slow (two calls
#      of 9 s, a second runner taking over entries idle 12 s), the pick
#      run's queue entry, touched before each call, is not taken over: the
#      pull request opened once; a pick run cancelled while GitHub says
#      the base branch opens none (the flag read again before the POST)
#   3. opencode_cancel_run with groupId: two attempts running, both
#      cancelled, their sandboxes gone
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image ($SMCP_SANDBOX_IMAGE) is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;

use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_encode wait_until);

my $WRITE = 'cd /workspace/repo && hostname > attempt.txt && echo WROTE-$(hostname)';

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-ATTEMPT' => [ bash_step($WRITE, 'Write'), { text => 'My attempt.' } ],
        'SCENARIO-ATTHANG' => [ bash_step('echo STARTED', 'Start'), { hang => 120 } ],
    },
    repos => { 'acme/app' => { 'README.md' => "# app\n" } },
);
my $t = $s->t;
my $gh = $s->github;
# (a bytes budget under the module's 128m: a pick the runner fails)
my $r = $s->start_runner(concurrency => 3, args => [ '--tenant-redis-bytes', '64m' ]);
my $main = $gh->ref_commit('acme/app', 'main');

# run_task with attempts: its answer, every session remembered (cleanup)
sub attempts {
    my (%args) = @_;
    my $sc = $s->run_task(%args);
    $s->{sessions}{ $_->{sessionId} } = 1 for @{ $sc->{attempts} || [] };
    return $sc;
}

subtest 'three attempts side by side, a draft pull request each' => sub {
    my $g = attempts(task => 'SCENARIO-ATTEMPT: try it', attempts => 3,
                     repository => 'https://github.com/acme/app',
                     createPullRequest => JSON::PP::true, draft => JSON::PP::true);
    my @runs = map { $_->{runId} } @{ $g->{attempts} || [] };
    is(scalar @runs, 3, 'three attempts') or return;
    is($g->{groupId}, $runs[0], 'grouped under the first');
    my %res = map { ($_ => $s->wait_done($_, 300)) } @runs;
    for my $id (@runs) {
        is($res{$id}{status}, 'completed', "$id: completed")
            or $s->diag_run($id, $r);
    }
    my @ses = map { $res{$_}{sessionId} } @runs;
    is(scalar(keys %{{ map { $_ => 1 } @ses }}), 3, 'three sessions');
    my @ct = map { $s->run_hash($_)->{container_id} // '' } @runs;
    is(scalar(keys %{{ map { $_ => 1 } grep { length } @ct }}), 3, 'three sandboxes');

    my @started = sort { $a <=> $b } map { $s->run_hash($_)->{started_at} // 0 } @runs;
    my @ended = sort { $a <=> $b } map { $s->run_hash($_)->{finished_at} // 0 } @runs;
    ok($started[-1] < $ended[0], 'side by side: the last started before the first ended')
        or diag("started @started, ended @ended");

    my @pulls = $gh->pulls('acme/app');
    is(scalar @pulls, 3, 'three pull requests');
    my %words;
    for my $i (0 .. 2) {
        my $id = $runs[$i];
        my $branch = "opencode/$id";
        my $file = $gh->file_content('acme/app', $branch, 'attempt.txt') // '';
        like($file, qr/^\S+\n$/, "attempt " . ($i + 1) . ": its branch has its attempt.txt");
        $words{$file} = 1;
        my ($p) = grep { $_->{head}{ref} eq $branch } @pulls;
        ok($p && $p->{draft}, '... and a draft pull request of that branch');
        is($res{$id}{pullRequestUrl}, $p && $p->{html_url}, '... its pullRequestUrl');
    }
    is(scalar keys %words, 3, 'three different attempt.txt: each wrote its own');
    is($gh->ref_commit('acme/app', 'main'), $main, 'main untouched');

    my $two = $s->result($runs[1]);
    is($two->{groupId}, $runs[0], 'get_result on the second: the group');
    is($two->{attempt}, 2, '... its number');
    my @a = @{ $two->{attempts} || [] };
    is_deeply([ map { $_->{runId} } @a ], \@runs, '... every attempt');
    for my $i (0 .. 2) {
        my $mine = $res{ $runs[$i] };
        is_deeply({ map { ($_ => $a[$i]{$_}) }
                    qw(sessionId status diffStat cost pullRequestUrl pullRequestStatus) },
                  { map { ($_ => $mine->{$_}) }
                    qw(sessionId status diffStat cost pullRequestUrl pullRequestStatus) },
                  "attempt " . ($i + 1) . ': as its own result says');
        like($a[$i]{diffStat} // '', qr/1 file changed/, '... a diffStat');
    }
};

subtest 'a pull request for the attempt picked alone' => sub {
    my $g = attempts(task => 'SCENARIO-ATTEMPT: pick one', attempts => 2,
                     repository => 'https://github.com/acme/app',
                     createPullRequest => JSON::PP::true, prTitle => 'The one we keep');
    my @runs = map { $_->{runId} } @{ $g->{attempts} || [] };
    is(scalar @runs, 2, 'two attempts') or return;
    my $before = scalar @{ $gh->pulls('acme/app') };
    for my $id (@runs) {
        my $res = $s->wait_done($id, 300);
        is($res->{status}, 'completed', "$id: completed") or $s->diag_run($id, $r);
        is($res->{pullRequestStatus}, 'pushed', '... its branch pushed, its pull request waiting');
        like($gh->file_content('acme/app', "opencode/$id", 'attempt.txt') // '', qr/^\S+\n$/,
             '... the branch has its attempt.txt');
    }
    is(scalar @{ $gh->pulls('acme/app') }, $before, 'no pull request yet');

    # a pick run the runner fails before it tries (the tenant over the
    # runner's bytes budget, under the module's): the pick undone
    my $usage = 'smcp:tenant:' . $s->run_hash($runs[1])->{tenant} . ':usage';
    my $over = 100 * 1024 * 1024;
    $t->redis('HINCRBY', $usage, 'bytes', $over);
    my $failed = SMCP::Test::sc($s->call('opencode_pick_attempt',
                                         { groupId => $g->{groupId}, runId => $runs[1] }));
    ok($failed && $failed->{pickRunId}, 'a pick queued') or diag(json_encode($failed));
    my $fres = $s->wait_done($failed->{pickRunId}, 120);
    is($fres->{status}, 'failed', '... failed by the runner (the tenant over its budget)');
    $t->redis('HINCRBY', $usage, 'bytes', -$over);
    is($s->result($runs[1])->{pullRequestStatus}, 'pushed', '... the attempt waits again');
    ok(!$s->run_hash($g->{groupId})->{picked}, '... the group has no pick: another may be tried');

    # a pick run cancelled while its runner takes it up (the runner
    # paused; the run flagged, as run_cancel.lua flags a running one): no
    # pull request, the pick undone
    kill 'STOP', $r->{pid};
    my $c = SMCP::Test::sc($s->call('opencode_pick_attempt',
                                    { groupId => $g->{groupId}, runId => $runs[1] }));
    $t->redis('HSET', "smcp:run:$c->{pickRunId}", cancel_requested => 1) if $c;
    kill 'CONT', $r->{pid};
    ok($c && $c->{pickRunId}, 'a pick queued, then flagged cancelled') or diag(json_encode($c));
    my $cres = $s->wait_done($c->{pickRunId}, 120);
    is($cres->{status}, 'cancelled', '... cancelled by its runner');
    is(scalar @{ $gh->pulls('acme/app') }, $before, '... no pull request');
    is($s->result($runs[1])->{pullRequestStatus}, 'pushed', '... the attempt waits again');
    ok(!$s->run_hash($g->{groupId})->{picked}, '... the group has no pick');

    # a pick run whose pull request a runner before it opened and wrote
    # down (it died before the run's end was stored): its runner takes
    # that for its end, a cancel flagged since notwithstanding
    kill 'STOP', $r->{pid};
    my $o = SMCP::Test::sc($s->call('opencode_pick_attempt',
                                    { groupId => $g->{groupId}, runId => $runs[0] }));
    my $url = 'https://github.com/acme/app/pull/999';
    if ($o) {
        $t->redis('HSET', "smcp:run:$runs[0]", pr_status => 'opened', pr_url => $url,
                  pr_number => 999);
        $t->redis('HSET', "smcp:run:$o->{pickRunId}", cancel_requested => 1);
    }
    kill 'CONT', $r->{pid};
    ok($o && $o->{pickRunId}, 'a pick queued, its pull request opened before') or diag(json_encode($o));
    my $ores = $s->wait_done($o->{pickRunId}, 120);
    is($ores->{status}, 'completed', '... completed') or $s->diag_run($o->{pickRunId}, $r);
    is($ores->{pullRequestUrl}, $url, '... with that pull request');
    is(scalar @{ $gh->pulls('acme/app') }, $before, '... none opened');
    is($s->result($runs[0])->{pullRequestStatus}, 'opened', '... the attempt still opened');
    # (put back for what follows)
    $t->redis('HSET', "smcp:run:$runs[0]", pr_status => 'pushed');
    $t->redis('HDEL', "smcp:run:$runs[0]", qw(pr_url pr_number pr_pick_run));
    $t->redis('HDEL', "smcp:run:$g->{groupId}", 'picked');

    # its runner killed while GitHub opens the pull request (its answer
    # held back): the runner started again takes the pick run up and
    # finds that pull request, none opened twice
    $gh->api_fault('POST', '^/repos/acme/app/pulls$', apply => 1, hang => 60);
    my $pick = SMCP::Test::sc($s->call('opencode_pick_attempt',
                                       { groupId => $g->{groupId}, runId => $runs[1] }));
    ok($pick && $pick->{pickRunId}, 'opencode_pick_attempt: a run opens it')
        or return diag(json_encode($pick));
    ok(wait_until(60, sub { scalar @{ $gh->pulls('acme/app') } > $before }, 0.1),
       '... GitHub opened it, its answer held back') or $s->diag_run($pick->{pickRunId}, $r);
    $s->stop_runner($r, 'KILL');
    $gh->api_fault();
    $r = $s->start_runner(concurrency => 3, args => [ '--tenant-redis-bytes', '64m' ]);
    my $done = $s->wait_done($pick->{pickRunId}, 120);
    is($done->{status}, 'completed', 'that run completed') or $s->diag_run($pick->{pickRunId}, $r);
    my @pulls = $gh->pulls('acme/app');
    is(scalar @pulls, $before + 1, 'one pull request more');
    my $p = $pulls[-1] || {};
    is($p->{head}{ref}, "opencode/$runs[1]", '... of the attempt picked');
    ok(!$p->{draft}, '... not a draft');
    is($p->{title}, 'The one we keep', '... its title the run\'s');
    my $two = $s->result($runs[1]);
    is($two->{pullRequestUrl}, $p->{html_url}, 'the attempt\'s pullRequestUrl');
    is($two->{pullRequestStatus}, 'opened', '... opened');
    is($s->result($runs[0])->{pullRequestStatus}, 'pushed', 'the other: none');
    is($done->{pullRequestUrl}, $p->{html_url}, 'the pick run says it too');
    ok(!$s->run_containers($pick->{pickRunId}), 'the pick run had no sandbox');
    my $again = $s->call('opencode_pick_attempt', { groupId => $g->{groupId}, runId => $runs[0] });
    ok($again->{isError}, 'a second pick refused');

    # a slow GitHub: two calls (the default branch, then the pull request)
    # of 9 s each; a second runner, started once the pick run is taken,
    # takes over entries idle 12 s (looking every 5 s; the first runner's
    # 60 s: it never claims its own): the pick run's entry, touched before
    # each call, is never idle that long; the pull request opened once
    $t->redis('HDEL', "smcp:run:$g->{groupId}", 'picked');
    $s->stop_runner($r);
    my @args = (concurrency => 3, args => [ '--tenant-redis-bytes', '64m' ]);
    $r = $s->start_runner(@args, claim_idle => 60000);
    $gh->clear_requests;
    $gh->api_fault('GET', '^/repos/acme/app$', delay => 9);
    $gh->api_fault('POST', '^/repos/acme/app/pulls$', delay => 9);
    my $slow = SMCP::Test::sc($s->call('opencode_pick_attempt',
                                       { groupId => $g->{groupId}, runId => $runs[0] }));
    ok($slow && $slow->{pickRunId}, 'a pick with GitHub slow') or return diag(json_encode($slow));
    ok(wait_until(30, sub { $s->runner_log($r) =~ /\Q$slow->{pickRunId}\E.*opening the pull request/ },
                  0.1), '... taken by the first runner') or $s->diag_run($slow->{pickRunId}, $r);
    my $r2 = $s->start_runner(@args, claim_idle => 12000, name => $s->runner_name . '-b');
    my $sdone = $s->wait_done($slow->{pickRunId}, 120);
    $gh->api_fault();
    is($sdone->{status}, 'completed', '... completed') or $s->diag_run($slow->{pickRunId}, $r);
    is(scalar @{ $gh->requests(method => 'GET', path => '/repos/acme/app') }, 1,
       '... its default branch asked once');
    is(scalar @{ $gh->requests(method => 'POST', path => '/repos/acme/app/pulls') }, 1,
       '... its pull request opened once');
    unlike($s->runner_log($r2), qr/taking over/, '... the second runner took nothing over');
    $s->stop_runner($r2);

    # a pick run cancelled while GitHub tells its runner the base branch
    # (after the runner's first look at the flag): read again right
    # before the POST; no pull request, the pick undone
    $t->redis('HSET', "smcp:run:$runs[0]", pr_status => 'pushed');
    $t->redis('HDEL', "smcp:run:$runs[0]", qw(pr_url pr_number pr_pick_run));
    $t->redis('HDEL', "smcp:run:$g->{groupId}", 'picked');
    $gh->clear_requests;
    $gh->api_fault('GET', '^/repos/acme/app$', delay => 10);
    my $late = SMCP::Test::sc($s->call('opencode_pick_attempt',
                                       { groupId => $g->{groupId}, runId => $runs[0] }));
    ok($late && $late->{pickRunId}, 'a pick, GitHub slow to say the base')
        or return diag(json_encode($late));
    ok(wait_until(30, sub { grep { m{^GET /repos/acme/app$} } $gh->delayed }, 0.05),
       '... its runner asks') or $s->diag_run($late->{pickRunId}, $r);
    my $cx = SMCP::Test::sc($s->call('opencode_cancel_run', { runId => $late->{pickRunId} }));
    ok($cx, '... cancelled meanwhile') or diag(json_encode($cx));
    my $lres = $s->wait_done($late->{pickRunId}, 60);
    $gh->api_fault();
    is($lres->{status}, 'cancelled', '... the run cancelled') or $s->diag_run($late->{pickRunId}, $r);
    ok(!$lres->{pullRequestUrl}, '... with no pull request');
    is(scalar @{ $gh->requests(method => 'POST', path => '/repos/acme/app/pulls') }, 0,
       '... none asked of GitHub');
    is($s->result($runs[0])->{pullRequestStatus}, 'pushed', '... the attempt waits again');
    ok(!$s->run_hash($g->{groupId})->{picked}, '... the group has no pick');
};

subtest 'cancel the group' => sub {
    my $g = attempts(task => 'SCENARIO-ATTHANG: wait', attempts => 2);
    my @runs = map { $_->{runId} } @{ $g->{attempts} || [] };
    is(scalar @runs, 2, 'two attempts') or return;
    ok(wait_until(240, sub {
        2 == grep { ($s->run_hash($_)->{status} // '') eq 'running'
                    && $s->tool_output($_) =~ /STARTED/ } @runs
    }, 0.5), 'both running') or $s->diag_run($runs[0], $r);
    my $res = SMCP::Test::sc($s->call('opencode_cancel_run', { groupId => $g->{groupId} }));
    is($res && $res->{groupId}, $g->{groupId}, 'cancel_run groupId: the group answered');
    for my $id (@runs) {
        is($s->wait_done($id, 120)->{status}, 'cancelled', "$id: cancelled");
        ok(wait_until(60, sub { !$s->run_containers($id) }, 0.5), '... its sandbox gone');
    }
};

$s->done;
