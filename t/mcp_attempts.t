#!/usr/bin/perl

# Attempts (issue 26, point 1) through the MCP endpoint, against a real
# Redis (no runner: t/attempts.t runs them in sandboxes):
# opencode_run_task with attempts makes N runs, each the first of a new
# session, grouped under the first one's runId, all at once or none;
# opencode_get_result on any of them lists every attempt; the refusals
# write nothing; opencode_pick_attempt queues the run that opens the
# picked attempt's pull request, once (for a token granting the attempt's
# repositories, a tenant under its budgets); opencode_cancel_run with
# groupId cancels every attempt and the run opening the pick's pull
# request, another tenant's group is not found.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_encode now_ms tool_ok tool_err);

my $t = SMCP::Test->new(
    workers  => 2,
    location => q{
            sandbox_mcp_max_queued 6;
            sandbox_mcp_public_url http://mcp.test:9999;
            sandbox_mcp_default_model test/model-x;},
);
$t->start;

my $P = 'smcp:';
my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session');
my $bob_tok = $t->token(sub => 'bob');
my ($bob_sid) = $t->initialize(token => $bob_tok);

sub call { my ($name, $args, %o) = @_; return scalar $t->call_tool($sid, $name, $args, %o) }

sub queued { return scalar @{ $t->redis('XRANGE', "${P}queue", '-', '+') || [] } }

my $repo = 'https://github.com/acme/app';

subtest 'refusals write nothing' => sub {
    my $keys = $t->redis('DBSIZE');
    tool_err(call('opencode_run_task', { task => 't', attempts => 5 }),
             qr/'attempts' must be between 1 and 4/, 'five attempts');
    tool_err(call('opencode_run_task', { task => 't', attempts => 0 }),
             qr/'attempts' must be between 1 and 4/, 'no attempt');
    tool_err(call('opencode_run_task', { task => 't', attempts => 'two' }),
             qr/'attempts' must be an integer/, 'attempts not a number');
    tool_err(call('opencode_run_task', { task => 't', attempts => 2,
                                         sessionId => 'ses_' . ('1' x 24) }),
             qr/new session of its own: not with sessionId/, 'attempts in a session');
    tool_err(call('opencode_run_task', { task => 't', attempts => 2,
                                         forkSessionId => 'ses_' . ('1' x 24) }),
             qr/not with sessionId or forkSessionId/, 'attempts of a fork');
    is($t->redis('DBSIZE'), $keys, '... no key written');
    # 6 queued at most: 3 + 4 do not fit
    my $fill = tool_ok(call('opencode_run_task', { task => 'fill', attempts => 3 }),
                       'three queued');
    my $n = queued();
    my $before = $t->redis('DBSIZE');
    tool_err(call('opencode_run_task', { task => 't', attempts => 4 }),
             qr/6 queued runs at most, and these 4 attempts would pass it/,
             'four more attempts past the queue limit');
    is($t->redis('DBSIZE'), $before, '... no key written');
    is(queued(), $n, '... nothing queued');
    tool_ok(call('opencode_cancel_run', { groupId => $fill->{groupId} }),
            'the three cancelled (room in the queue again)');
    is($t->redis('SCARD', "${P}tenant:alice:started"), 0, '... none queued for alice');
};

my ($group, @runs, @sessions);
subtest 'three attempts' => sub {
    my $sc = tool_ok(call('opencode_run_task', { task => 'try it', repository => $repo,
                                                  branch => 'dev', attempts => 3,
                                                  createPullRequest => JSON::PP::true(),
                                                  draft => JSON::PP::true() }),
                     'run_task with attempts');
    is(scalar @{ $sc->{attempts} || [] }, 3, 'three attempts answered');
    @runs = map { $_->{runId} } @{ $sc->{attempts} };
    @sessions = map { $_->{sessionId} } @{ $sc->{attempts} };
    $group = $sc->{groupId};
    is($group, $runs[0], 'groupId: the first attempt\'s runId');
    is($sc->{runId}, $runs[0], 'runId: the first attempt');
    is($sc->{sessionId}, $sessions[0], 'sessionId: the first attempt\'s');
    is(scalar(keys %{{ map { $_ => 1 } @runs }}), 3, 'three runs');
    is(scalar(keys %{{ map { $_ => 1 } @sessions }}), 3, '... in three sessions');
    for my $a (@{ $sc->{attempts} }) {
        like($a->{watchUrl} // '', qr{^http://mcp\.test:9999/ui/runs/\Q$a->{runId}\E\?},
             "$a->{runId}: its own run page");
    }
    my %mine = map { $_ => 1 } @runs;
    is(scalar(grep { $mine{ $_->[1][1] } } @{ $t->redis('XRANGE', "${P}queue", '-', '+') }),
       3, 'all three queued');
    for my $i (0 .. 2) {
        my $h = $t->run_hash($runs[$i]);
        is_deeply([ @{$h}{qw(group group_attempt group_runs session repository branch
                             create_pr draft task)} ],
                  [ $group, $i + 1, "@runs", $sessions[$i], $repo, 'dev', 1, 1,
                    'try it' ],
                  "attempt " . ($i + 1) . ': the same task, repository, branch and '
                  . 'pull request; its own session');
    }
};

subtest 'get_result on any attempt lists every one' => sub {
    $t->redis('HSET', "${P}run:$runs[1]", status => 'completed', diff_stat => '1 file changed',
              cost => '0.25', pr_url => 'https://github.com/acme/app/pull/7',
              pr_status => 'opened');
    for my $i (0 .. 2) {
        my $sc = tool_ok(call('opencode_get_result', { runId => $runs[$i] }),
                         "get_result on attempt " . ($i + 1));
        is($sc->{runId}, $runs[$i], '... the run asked');
        is($sc->{groupId}, $group, '... its group');
        is($sc->{attempt}, $i + 1, '... its number');
        is_deeply([ map { $_->{runId} } @{ $sc->{attempts} } ], \@runs, '... every attempt');
        is_deeply([ map { $_->{sessionId} } @{ $sc->{attempts} } ], \@sessions,
                  '... in its own session');
        like(delete $sc->{attempts}[1]{watchUrl} // '',
             qr{^http://mcp\.test:9999/ui/runs/\Q$runs[1]\E\?token=},
             '... the second\'s run page, signed');
        is_deeply($sc->{attempts}[1],
                  { runId => $runs[1], attempt => 2, sessionId => $sessions[1],
                    status => 'completed', diffStat => '1 file changed', cost => 0.25,
                    pullRequestUrl => 'https://github.com/acme/app/pull/7',
                    pullRequestStatus => 'opened', error => undef },
                  '... the second: status, diffStat, cost, pull request');
        is($sc->{attempts}[0]{status}, 'started', '... the first queued');
    }
    my $r = $t->call_tool($bob_sid, 'opencode_get_result', { runId => $runs[0] },
                          token => $bob_tok);
    tool_err($r, qr/Run not found/, "another tenant's attempt");
};

subtest 'a run of no group answers as before' => sub {
    my $sc = tool_ok(call('opencode_run_task', { task => 'alone' }), 'one run');
    my $g = tool_ok(call('opencode_get_result', { runId => $sc->{runId} }), 'its result');
    ok(!exists $g->{attempts} && !exists $g->{groupId}, 'no attempts, no groupId');
    # a group_runs that does not name the run itself: not as run_create
    # writes it, so no group
    $t->redis('HSET', "${P}run:$sc->{runId}", group_runs => "$runs[1] $runs[2]");
    $g = tool_ok(call('opencode_get_result', { runId => $sc->{runId} }),
                 'a group_runs without the run');
    ok(!exists $g->{attempts} && !exists $g->{groupId}, '... no attempts, no groupId');
    $t->redis('HDEL', "${P}run:$sc->{runId}", 'group_runs');
    tool_err(call('opencode_cancel_run', { groupId => $sc->{runId} }),
             qr/Group not found/, 'cancel_run groupId of a run of no group');
    is($t->run_hash($sc->{runId})->{status}, 'started', '... that run left alone');
    call('opencode_cancel_run', { runId => $sc->{runId} });
};

subtest 'pick an attempt: its pull request, for it alone' => sub {
    my $g = tool_ok(call('opencode_run_task', { task => 'pick one', repository => $repo,
                                                 attempts => 2,
                                                 createPullRequest => JSON::PP::true() }),
                    'two attempts, a pull request for the one picked');
    my ($one, $two) = map { $_->{runId} } @{ $g->{attempts} };
    is($t->run_hash($_)->{pr_pick}, '1', "$_: its pull request waits for the pick")
        for $one, $two;
    tool_err(call('opencode_pick_attempt', { groupId => $g->{groupId}, runId => $two }),
             qr/cannot be picked: it is started, its pull request status none/,
             'an attempt not ended');
    $t->redis('HSET', "${P}run:$two", status => 'completed', pr_status => 'pushed');
    $t->redis('HSET', "${P}run:$one", status => 'completed', pr_status => 'pushed');
    tool_err(call('opencode_pick_attempt', { groupId => $two, runId => $two }),
             qr/Attempt not found/, 'a groupId that is no group\'s');
    tool_err(call('opencode_pick_attempt', { groupId => $g->{groupId}, runId => $runs[1] }),
             qr/Attempt not found/, 'an attempt of another group');
    my $r = $t->call_tool($bob_sid, 'opencode_pick_attempt',
                          { groupId => $g->{groupId}, runId => $two }, token => $bob_tok);
    tool_err($r, qr/Attempt not found/, "another tenant's");
    is($t->run_hash($two)->{pr_status}, 'pushed', '... nothing picked');

    my $sc = tool_ok(call('opencode_pick_attempt', { groupId => $g->{groupId}, runId => $two }),
                     'pick the second');
    is_deeply([ @{$sc}{qw(groupId runId status)} ], [ $g->{groupId}, $two, 'started' ],
              'the answer: the group, the attempt, started');
    my $h = $t->run_hash($sc->{pickRunId});
    is_deeply([ @{$h}{qw(pr_of session create_pr draft status repository)} ],
              [ $two, $g->{attempts}[1]{sessionId}, 1, 0, 'started', $repo ],
              'a run in its session opens its pull request (no draft)');
    like($sc->{watchUrl} // '', qr{/ui/runs/\Q$sc->{pickRunId}\E\?token=}, '... its page');
    is($t->run_hash($two)->{pr_status}, 'picked', 'the attempt: picked');
    tool_err(call('opencode_pick_attempt', { groupId => $g->{groupId}, runId => $one }),
             qr/has its pick already: \Q$two\E/, 'a second pick');

    # the pick run cancelled before it started: the pick undone
    my $c = tool_ok(call('opencode_cancel_run', { runId => $sc->{pickRunId} }),
                    'the pick run cancelled');
    is($c->{status}, 'cancelled', '... before it started');
    is($t->run_hash($two)->{pr_status}, 'pushed', '... the attempt waits again');
    ok(!exists $t->run_hash($g->{groupId})->{picked}, '... the group has no pick');
    my $again = tool_ok(call('opencode_pick_attempt', { groupId => $g->{groupId},
                                                        runId => $one }),
                        'the first picked instead');
    is($t->run_hash($g->{groupId})->{picked}, $one, '... the group\'s pick');

    # the group cancelled: its pick run too, not started: the pick undone
    my $gc = tool_ok(call('opencode_cancel_run', { groupId => $g->{groupId} }),
                     'the group cancelled');
    is($t->run_hash($again->{pickRunId})->{status}, 'cancelled', '... its pick run too');
    is($t->run_hash($one)->{pr_status}, 'pushed', '... the attempt waits again');
    ok(!exists $t->run_hash($g->{groupId})->{picked}, '... the group has no pick');
    is_deeply([ map { $_->{status} } @{ $gc->{attempts} } ], [ 'completed', 'completed' ],
              '... the attempts, ended, left as they were');

    # a pick run running: flagged for its runner, like a running attempt
    my $p3 = tool_ok(call('opencode_pick_attempt', { groupId => $g->{groupId}, runId => $two }),
                     'the second picked again');
    $t->redis('HSET', "${P}run:$p3->{pickRunId}", status => 'running');
    tool_ok(call('opencode_cancel_run', { groupId => $g->{groupId} }), 'the group cancelled again');
    is($t->run_hash($p3->{pickRunId})->{cancel_requested}, '1', '... the running pick run flagged');
    $t->redis('HSET', "${P}run:$p3->{pickRunId}", status => 'cancelled');   # its runner's part
    $t->redis('SREM', "${P}tenant:alice:started", $p3->{pickRunId});

    # an attempt's pr_pick_run naming another tenant's run: not touched
    my $b = tool_ok(scalar $t->call_tool($bob_sid, 'opencode_run_task',
                                         { task => 'bob', repository => $repo },
                                         token => $bob_tok), "bob's run");
    $t->redis('HSET', "${P}run:$one", pr_pick_run => $b->{runId});
    tool_ok(call('opencode_cancel_run', { groupId => $g->{groupId} }),
            'the group cancelled, an attempt naming another tenant\'s run');
    is($t->run_hash($b->{runId})->{status}, 'started', "... bob's run not cancelled");
    ok(!exists $t->run_hash($b->{runId})->{cancel_requested}, '... nor flagged');
    $t->call_tool($bob_sid, 'opencode_cancel_run', { runId => $b->{runId} }, token => $bob_tok);
};

subtest 'cancel the group' => sub {
    tool_err(call('opencode_cancel_run', { groupId => $runs[1] }), qr/Group not found/,
             "groupId: a later attempt's runId");
    tool_err(call('opencode_cancel_run', {}), qr/Pass runId .* or groupId/, 'neither');
    tool_err(call('opencode_cancel_run', { runId => $runs[0], groupId => $group }),
             qr/one of them/, 'both');
    my $r = $t->call_tool($bob_sid, 'opencode_cancel_run', { groupId => $group },
                          token => $bob_tok);
    tool_err($r, qr/Group not found/, "another tenant's group");
    is($t->run_hash($runs[0])->{status}, 'started', '... nothing cancelled');

    $t->redis('HSET', "${P}run:$runs[2]", status => 'running');
    my $sc = tool_ok(call('opencode_cancel_run', { groupId => $group }), 'cancel_run groupId');
    is($sc->{groupId}, $group, 'the group answered');
    is_deeply([ map { $_->{status} } @{ $sc->{attempts} } ],
              [ 'cancelled', 'completed', 'running' ],
              'queued: cancelled; completed: left; running: its runner stops it');
    is($t->run_hash($runs[2])->{cancel_requested}, '1', '... the running one flagged');
    is($t->run_hash($runs[1])->{status}, 'completed', '... the completed one left');
};

subtest "pick: the token's grants, the tenant's budgets" => sub {
    my $g = tool_ok(call('opencode_run_task', { task => 'pick with care', repository => $repo,
                                                 attempts => 2,
                                                 createPullRequest => JSON::PP::true() }),
                    'two attempts');
    my ($one, $two) = map { $_->{runId} } @{ $g->{attempts} };
    for my $id ($one, $two) {
        $t->redis('HSET', "${P}run:$id", status => 'completed', pr_status => 'pushed');
        $t->redis('SREM', "${P}tenant:alice:started", $id);
    }
    my %pick = (groupId => $g->{groupId}, runId => $two);
    my $nothing = sub {
        my ($what) = @_;
        is($t->run_hash($two)->{pr_status}, 'pushed', "$what: the attempt not picked");
        ok(!exists $t->run_hash($g->{groupId})->{picked}, "$what: the group has no pick");
    };

    my $narrow = $t->token(repos => [ 'other/thing', 'acme/app-x' ]);
    my ($nsid) = $t->initialize(token => $narrow);
    tool_err(scalar $t->call_tool($nsid, 'opencode_pick_attempt', \%pick, token => $narrow),
             qr/^Attempt \Q$two\E works on \Q$repo\E, which this token does not grant/,
             'a token that does not grant the repository: refused');
    $nothing->('not granted');

    my $own = $t->token(repos => [ 'acme/app' ]);
    my ($osid) = $t->initialize(token => $own);
    my $usage = "${P}tenant:alice:usage";
    my %was = @{ $t->redis('HGETALL', $usage) || [] };
    $t->redis('HSET', $usage, bytes => 128 * 1024 * 1024);
    tool_err(scalar $t->call_tool($osid, 'opencode_pick_attempt', \%pick, token => $own),
             qr/^Tenant budget exceeded: your runs, their events and diffs hold 134217728 bytes/,
             'the tenant at its bytes budget: refused');
    $nothing->('bytes budget');
    $t->redis('HSET', $usage, bytes => $was{bytes} // 0, disk => 20 * 1024 ** 3);
    tool_err(scalar $t->call_tool($osid, 'opencode_pick_attempt', \%pick, token => $own),
             qr/^Tenant budget exceeded: the workspaces of your sessions hold 21474836480 bytes/,
             'the tenant at its disk budget: refused');
    $nothing->('disk budget');
    $t->redis('HSET', $usage, disk => $was{disk} // 0);

    my $sc = tool_ok(scalar $t->call_tool($osid, 'opencode_pick_attempt', \%pick,
                                          token => $own),
                     'a token granting the repository, under the budgets: picked');
    is($t->run_hash($sc->{pickRunId})->{pr_of}, $two, '... the pick run');
    call('opencode_cancel_run', { runId => $sc->{pickRunId} });
};

$t->done;
