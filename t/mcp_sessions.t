#!/usr/bin/perl

# opencode_list_sessions against a real nginx and Redis: the tenant's
# sessions (tenant:{tenant}:sessions, kept by run_create), most recently
# active first; repositories, runs, lastActivity, createdAt and state
# (active, idle, expired); cursor paging (ties of a millisecond too); the
# state filter; another tenant's sessions never listed, even when their ids
# sit in this tenant's index; bad arguments and cursors are clear errors;
# an expired session refuses a follow-up without writing anything.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_encode now_ms iso_ms tool_ok tool_err b64url);

my $t = SMCP::Test->new(location => q{
            sandbox_mcp_public_url http://mcp.test;});
$t->start;

my $P = 'smcp:';
my ($sid) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session');
my $bob_tok = $t->token(sub => 'bob');
my ($bob_sid) = $t->initialize(token => $bob_tok);

sub call { my ($name, $args, %o) = @_; return scalar $t->call_tool($sid, $name, $args, %o) }
sub task { return tool_ok(call('opencode_run_task', { task => 't', @_ }), "run_task @_") }
sub list { return tool_ok(call('opencode_list_sessions', { @_ }), "list_sessions @_") }

my ($A, $B) = ('https://github.com/acme/a', 'https://github.com/acme/b');

# alice: s1 (a, then b), s2 (no repository), s3 (a); bob: one session
my $r1 = task(repository => $A);
my $s1 = $r1->{sessionId};
select(undef, undef, undef, 0.01);
my $r2 = task();
my $s2 = $r2->{sessionId};
select(undef, undef, undef, 0.01);
my $r3 = task(repository => $A);
my $s3 = $r3->{sessionId};
select(undef, undef, undef, 0.01);
my $r4 = task(sessionId => $s1, repository => $B);
my $bob = tool_ok(scalar $t->call_tool($bob_sid, 'opencode_run_task',
                                       { task => 'bob' }, token => $bob_tok), 'bob runs');

# s2's run finished (what the runner's finish does to these keys)
$t->redis('ZREM', "${P}session:$s2:active", $r2->{runId});
$t->redis('HSET', "${P}run:$r2->{runId}", status => 'completed');
# s3 expired by the runner
$t->redis('HSET', "${P}session:$s3", state => 'expired');

###############################################################################
# the list

my $l = list();
my @s = @{ $l->{sessions} || [] };
is_deeply([ map { $_->{sessionId} } @s ], [ $s1, $s3, $s2 ],
          'alice\'s sessions, most recently active first (s1 had a follow-up)');
ok(!defined $l->{nextCursor}, 'no nextCursor: the index was read to its end');
ok(!grep({ $_->{sessionId} eq $bob->{sessionId} } @s), "bob's session is not listed");
my %by = map { $_->{sessionId} => $_ } @s;
is_deeply($by{$s1}{repositories}, [ $A, $B ], 's1: repositories, first named first');
is($by{$s1}{runs}, 2, 's1: 2 runs');
is($by{$s1}{state}, 'active', 's1: active (its runs are started)');
is(iso_ms($by{$s1}{lastActivity}), $t->redis('HGET', "${P}session:$s1", 'last_active'),
   's1: lastActivity is last_active');
is(iso_ms($by{$s1}{createdAt}), $t->redis('HGET', "${P}session:$s1", 'created_at'),
   's1: createdAt');
is_deeply($by{$s2}{repositories}, [], 's2: no repositories');
is($by{$s2}{runs}, 1, 's2: 1 run');
is($by{$s2}{state}, 'idle', 's2: idle (no run started or running)');
is($by{$s3}{state}, 'expired', 's3: expired');
is_deeply($t->redis('ZRANGE', "${P}tenant:alice:sessions", 0, -1),
          [ $s2, $s3, $s1 ], 'tenant:alice:sessions, by last activity');

my $bl = tool_ok(scalar $t->call_tool($bob_sid, 'opencode_list_sessions', {},
                                      token => $bob_tok), 'bob lists');
is_deeply([ map { $_->{sessionId} } @{ $bl->{sessions} || [] } ], [ $bob->{sessionId} ],
          'bob sees only his session');

# state filter
for my $st ([ active => $s1 ], [ idle => $s2 ], [ expired => $s3 ]) {
    my $f = list(state => $st->[0]);
    is_deeply([ map { $_->{sessionId} } @{ $f->{sessions} || [] } ], [ $st->[1] ],
              "state $st->[0]");
}

# an expired session refuses a follow-up, writing nothing
{
    my $before = $t->redis_snapshot;
    tool_err(call('opencode_run_task', { task => 't', sessionId => $s3 }),
             qr/Session expired/, 'a follow-up in the expired session');
    is_deeply($t->redis_snapshot, $before, '... nothing written');
    $before = $t->redis_snapshot;
    tool_err(call('opencode_run_task', { task => 't', sessionId => $bob->{sessionId} }),
             qr/Unknown sessionId/, "bob's sessionId is unknown to alice");
    is_deeply($t->redis_snapshot, $before, '... nothing written');
}

# another tenant's id planted in alice's index: skipped
$t->redis('ZADD', "${P}tenant:alice:sessions", now_ms() + 1000, $bob->{sessionId});
$t->redis('ZADD', "${P}tenant:alice:sessions", now_ms() + 1000, 'ses_' . ('e' x 24));
$l = list();
is_deeply([ map { $_->{sessionId} } @{ $l->{sessions} || [] } ], [ $s1, $s3, $s2 ],
          "a planted id of bob's and a vanished session are skipped");

###############################################################################
# paging, ties of one millisecond included

my @mine = ($s1, $s2, $s3);
for (1 .. 6) {
    push @mine, task()->{sessionId};
}
my $tie = now_ms() - 100000;
$t->redis('ZADD', "${P}tenant:alice:sessions", $tie, $_) for @mine[3 .. 7];
for my $limit (1, 2, 4, 100) {
    my (@all, $cursor, $pages);
    while (1) {
        my $p = list(limit => $limit, defined $cursor ? (cursor => $cursor) : ());
        ok(@{ $p->{sessions} } <= $limit, "limit $limit: a page within it") if !$pages;
        push @all, map { $_->{sessionId} } @{ $p->{sessions} };
        $cursor = $p->{nextCursor};
        last if !defined $cursor || ++$pages > 50;
    }
    my %seen;
    ok(!grep({ $seen{$_}++ } @all), "limit $limit: no duplicates");
    is_deeply([ sort @all ], [ sort @mine ], "limit $limit: every session once");
}
{
    my (@all, $cursor, $pages);
    while (1) {
        my $p = list(limit => 1, state => 'idle', defined $cursor ? (cursor => $cursor) : ());
        push @all, map { $_->{sessionId} } @{ $p->{sessions} };
        ok(!grep({ $_->{state} ne 'idle' } @{ $p->{sessions} }), 'state idle: only idle ones')
            if !$pages;
        $cursor = $p->{nextCursor};
        last if !defined $cursor || ++$pages > 50;
    }
    is_deeply([ sort @all ], [ $s2 ], 'state idle with limit 1: the one idle session');
}

###############################################################################
# bad arguments: clear errors

my $run_cursor = b64url('r:' . $r1->{runId} . ':' . now_ms());
for my $c (
    [ { limit => 0 },               qr/limit/,   'limit 0' ],
    [ { limit => 101 },             qr/limit/,   'limit 101' ],
    [ { limit => 'x' },             qr/limit/,   'limit string' ],
    [ { state => 'done' },          qr/state/,   'state not in the enum' ],
    [ { state => 1 },               qr/state/,   'numeric state' ],
    [ { cursor => 'garbage' },      qr/cursor/,  'a cursor not given by the server' ],
    [ { cursor => 42 },             qr/cursor/,  'numeric cursor' ],
    [ { cursor => $run_cursor },    qr/cursor/,  "list_runs' cursor" ],
    [ { cursor => b64url("s:$s1:-1") }, qr/cursor/, 'a cursor with a negative score' ],
    [ { other => 1 },               qr/other/,   'an unknown argument' ],
) {
    tool_err(call('opencode_list_sessions', $c->[0]), $c->[1], "list_sessions: $c->[2]");
}

$t->done;
