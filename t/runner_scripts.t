#!/usr/bin/env perl
# The runner's Redis scripts (ngx_sandbox_mcp_module/common/scripts/*.lua, the very files the
# runner embeds) run straight against redis-server, key by key: the
# contract of docs/contracts.md, "Keys every script is handed" (every key a
# script touches comes in KEYS, as the runner builds them from the run
# hash; none is built inside Lua).
#
#   claim.lua    the run still `started`, no other live claim, the first of
#                its session's unfinished runs (session:{id}:active), the
#                tenant's claimed runs (tenant:{t}:claimed) under
#                `max_running`; on ok it moves from tenant:{t}:started to
#                tenant:{t}:claimed; `attempts` counted; a session being
#                forked (a live hold in session:{id}:forks) waits
#   running.lua  `running` once the container runs (told on the tenant's
#                channel too); a run cancelled meanwhile
#                leaves the session's and the tenant's sets
#   finish.lua   the outcome once; the run leaves session:{id}:active and
#                both tenant sets; its keys expire after `retention`; the
#                session's last_active and its `sessions` score (last_active
#                + idle_ttl) bumped, and its score in tenant:{tenant}:sessions
#   janitor_begin.lua / janitor_end.lua   an idle session (due in
#                `sessions`, session:{id}:active empty) marked `expiring` by
#                one runner at a time (a dead runner's mark taken over when
#                stale), then `expired`, its keys kept `retention` more, and
#                off its tenant's usage (sessions, disk)
#   the tenant's budgets: finish.lua adds what the outcome holds to the
#                run's and the tenant's `bytes` and lists the run in
#                budget:expiry; budget_release.lua takes it off once its
#                keys expired, once; usage_disk.lua keeps a session's
#                workspace in the tenant's `disk`
#   run_waiting.lua   a queued run held by the host floor says why, once;
#                running.lua clears it
#
# And the runner itself against that Redis (needs Docker: the runner pings
# dockerd first): a Redis that wants a password (--redis-password-file,
# $SMCP_REDIS_PASSWORD: AUTH on every connect, the password never logged);
# scripts lost to SCRIPT FLUSH loaded again (NOSCRIPT), a Redis loading its
# dataset waited for (LOADING).
#
# Needs redis-server (and `make`); CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Test qw(json_decode json_encode wait_until repo_root lua_script);

my $t = SMCP::Test->new;
$t->start_redis;

my $P = 'smcp:';
my %LUA;
for my $name (qw(claim running finish janitor_begin janitor_end budget_release
                 usage_disk run_waiting pick_done)) {
    $LUA{$name} = lua_script(repo_root() . '/ngx_sandbox_mcp_module/common/scripts',
                             $name);
}

sub script {
    my ($name, $keys, $argv) = @_;
    die "no script $name\n" unless $LUA{$name};
    return $t->redis('EVAL', $LUA{$name}, scalar(@$keys), @$keys, @$argv);
}

sub hash { return $t->redis_hgetall(@_) }

my $STALE = 60000;
my $now = int(time() * 1000);

# claim(run, instance, [now]) with the keys the runner passes (from the
# run hash: its session and tenant)
sub claim {
    my ($id, $inst, $at) = @_;
    my $h = hash("${P}run:$id");
    return script('claim',
        [ "${P}run:$id",
          defined $h->{session} ? "${P}session:$h->{session}:active" : '',
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}:started" : '',
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}:claimed" : '',
          defined $h->{session} ? "${P}session:$h->{session}:forks" : '' ],
        [ $id, $inst, $at // $now, $STALE ]);
}

sub run {
    my ($id, %f) = @_;
    $t->redis('DEL', "${P}run:$id");
    $t->redis('HSET', "${P}run:$id", %f) if %f;
}

# a run as run_create leaves it: `started`, in session:{id}:active (scored
# by created_at) and tenant:{t}:started
sub created {
    my ($id, %f) = @_;
    my $at = $f{created_at} //= $now;
    run($id, status => 'started', %f);
    $t->redis('ZADD', "${P}session:$f{session}:active", $at, $id) if $f{session};
    $t->redis('SADD', "${P}tenant:$f{tenant}:started", $id) if $f{tenant};
}

sub members { return [ sort @{ $t->redis('SMEMBERS', $_[0]) // [] } ] }

##############################################################################

# pick_done (runner/pick.c): KEYS the attempt's and the group's run
# hashes; ARGV the pick run, "opened" or not, the URL and number
subtest 'pick_done: the pull request, or the pick undone; only its own pick' => sub {
    my ($att, $grp) = ("${P}run:run_patt", "${P}run:run_pgrp");
    my $setup = sub {
        run('run_patt', tenant => 'tia', group => 'run_pgrp', pr_status => 'picked',
            pr_pick_run => 'run_ppick');
        run('run_pgrp', tenant => 'tia', picked => 'run_patt');
    };
    $setup->();
    is(script('pick_done', [ $att, $grp ], [ 'run_pother', 'opened', 'https://x/1', 1 ]), 0,
       "another pick run's outcome: 0");
    is(hash($att)->{pr_status}, 'picked', '... the attempt untouched');
    is(script('pick_done', [ $att, $grp ], [ 'run_ppick', 'opened', 'https://x/1', 7 ]), 1,
       'opened: 1');
    is_deeply([ @{ hash($att) }{qw(pr_status pr_url pr_number)} ], [ 'opened', 'https://x/1', 7 ],
              "... the attempt's pull request");
    is(hash($grp)->{picked}, 'run_patt', '... the group keeps its pick');
    # opened is final: the pick run taken up again after its runner went
    # away (or cancelled then) neither undoes it nor writes another
    is(script('pick_done', [ $att, $grp ], [ 'run_ppick', '', '', '' ]), 0,
       'then undone: 0, opened is final');
    is_deeply([ @{ hash($att) }{qw(pr_status pr_pick_run)} ], [ 'opened', 'run_ppick' ],
              '... the attempt still opened');
    is(hash($grp)->{picked}, 'run_patt', '... the group keeps its pick');
    is(script('pick_done', [ $att, $grp ], [ 'run_ppick', 'opened', 'https://x/2', 8 ]), 0,
       'opened again: 0');
    is(hash($att)->{pr_url}, 'https://x/1', '... the first kept');

    $setup->();
    is(script('pick_done', [ $att, $grp ], [ 'run_ppick', '', '', '' ]), 1, 'not opened: 1');
    is(hash($att)->{pr_status}, 'pushed', '... the attempt pushed again');
    ok(!exists hash($att)->{pr_pick_run}, '... without its pick run');
    ok(!exists hash($grp)->{picked}, '... the group without its pick: another may be tried');

    $t->redis('DEL', $att);
    is(script('pick_done', [ $att, $grp ], [ 'run_ppick', 'opened', 'https://x/1', 7 ]), 0,
       'the attempt gone (its keys expired): 0');
    is($t->redis('EXISTS', $att), 0, '... no hash made anew');
};

subtest 'claim: status, other claims, attempts' => sub {
    is(claim('run_missing', 'r1/1/a'), 'missing', 'no run: missing');
    created('run_a', tenant => 'alice', session => 'ses_1');
    is(claim('run_a', 'r1/1/a'), 'ok', 'a started run: ok');
    my $h = hash("${P}run:run_a");
    is($h->{claimed_by}, 'r1/1/a', 'claimed_by: the runner process');
    is($h->{claimed_at}, $now, 'claimed_at: now');
    is($h->{attempts}, 1, 'attempts 1');
    is_deeply(members("${P}tenant:alice:started"), [], 'it left the tenant\'s started set');
    is_deeply(members("${P}tenant:alice:claimed"), ['run_a'], '... for its claimed set');
    is($t->redis('ZSCORE', "${P}session:ses_1:active", 'run_a'), $now,
       'it stays in its session\'s active set');
    is(claim('run_a', 'r2/2/b'), 'claimed', 'another runner, while the claim is fresh: claimed');
    is(hash("${P}run:run_a")->{attempts}, 1, '... attempts unchanged');
    is(claim('run_a', 'r2/2/b', $now + $STALE + 1), 'ok', 'once the claim is stale: ok');
    is(hash("${P}run:run_a")->{attempts}, 2, '... attempts 2');
    is_deeply(members("${P}tenant:alice:claimed"), ['run_a'], '... claimed once');
    $t->redis('HSET', "${P}run:run_a", status => 'running');
    is(claim('run_a', 'r1/1/a'), 'running', 'a running run: running');
    $t->redis('HSET', "${P}run:run_a", status => 'cancelled');
    is(claim('run_a', 'r1/1/a'), 'cancelled', 'a cancelled run: cancelled');
};

subtest 'claim: runs of a session in order' => sub {
    my $act = "${P}session:ses_2:active";
    created('run_b1', tenant => 'alice', session => 'ses_2', created_at => 1);
    created('run_b2', tenant => 'alice', session => 'ses_2', created_at => 2);
    is(claim('run_b2', 'r1/1/a'), 'wait', 'an earlier run is unfinished: wait');
    is(hash("${P}run:run_b2")->{attempts}, undef, '... no attempt counted');
    ok($t->redis('SISMEMBER', "${P}tenant:alice:started", 'run_b2'), '... still started');
    is(claim('run_b1', 'r1/1/a'), 'ok', 'the first: ok');
    $t->redis('HSET', "${P}run:run_b1", status => 'running');
    is(claim('run_b2', 'r1/1/a'), 'wait', 'the earlier run is running: wait');
    $t->redis('ZREM', $act, 'run_b1');      # as its finish does
    is(claim('run_b2', 'r1/1/a'), 'ok', 'the earlier run left the active set: ok');

    my $tie = "${P}session:ses_3:active";
    created('run_c2', tenant => 'alice', session => 'ses_3', created_at => 5);
    created('run_c1', tenant => 'alice', session => 'ses_3', created_at => 5);
    is(claim('run_c2', 'r1/1/a'), 'wait', 'the same created_at: the lower id first');
    is(claim('run_c1', 'r1/1/a'), 'ok', '... run_c1: ok');

    run('run_u', tenant => 'alice', session => 'ses_4', status => 'started');
    is(claim('run_u', 'r1/1/a'), 'unlisted',
       'a run missing from its session\'s active set: unlisted');
    is(hash("${P}run:run_u")->{claimed_by}, undef, '... not claimed');
    ok(!$t->redis('SISMEMBER', "${P}tenant:alice:claimed", 'run_u'), '... not in claimed');
};

subtest 'claim: a session being forked waits for the copy' => sub {
    my $forks = "${P}session:ses_5:forks";
    created('run_f1', tenant => 'alice', session => 'ses_5', created_at => 1);
    # a fork's run holds the forked session until its copy is made (or
    # the hold's end: its score)
    $t->redis('ZADD', $forks, $now + 60000, 'run_fork');
    is(claim('run_f1', 'r1/1/a'), 'forking', 'a live hold: forking');
    is(hash("${P}run:run_f1")->{attempts}, undef, '... no attempt counted');
    ok($t->redis('SISMEMBER', "${P}tenant:alice:started", 'run_f1'), '... still started');
    is(claim('run_f1', 'r1/1/a', $now + 60001), 'ok', 'the hold ended: ok');
    $t->redis('HSET', "${P}run:run_f1", status => 'started');
    $t->redis('HDEL', "${P}run:run_f1", 'claimed_by');
    $t->redis('ZADD', $forks, $now + 60000, 'run_fork');
    $t->redis('ZREM', $forks, 'run_fork');          # the copy made
    is(claim('run_f1', 'r1/1/a'), 'ok', 'the hold taken out: ok');
};

subtest 'claim: the tenant\'s running limit' => sub {
    my ($started, $claimed) = ("${P}tenant:bob:started", "${P}tenant:bob:claimed");
    $t->redis('SADD', $claimed, 'run_r1', 'run_r2');
    created('run_x', tenant => 'bob', session => 'ses_x', max_running => 2);
    is(claim('run_x', 'r1/1/a'), 'limit', 'max_running 2, two claimed: limit');
    is(hash("${P}run:run_x")->{claimed_by}, undef, '... not claimed');
    is_deeply(members($started), ['run_x'], '... still started');
    is_deeply(members($claimed), [qw(run_r1 run_r2)], '... the claimed set as it was');
    $t->redis('SREM', $claimed, 'run_r1');  # as its finish does
    is(claim('run_x', 'r1/1/a'), 'ok', 'one of them finished: ok');
    is_deeply(members($started), [], 'run_x left the started set');
    is_deeply(members($claimed), [qw(run_r2 run_x)], '... for the claimed set');
    is(claim('run_x', 'r2/2/b', $now + $STALE + 1), 'ok',
       'a stale claim taken over with the set full: itself aside, ok');

    created('run_y', tenant => 'bob', session => 'ses_y', max_running => 2);
    is(claim('run_y', 'r1/1/a'), 'limit', 'now x and r2 are claimed: the next waits');
    created('run_z', tenant => 'bob', session => 'ses_z');
    is(claim('run_z', 'r1/1/a'), 'ok', 'a run without max_running: no limit');
    created('run_w', tenant => 'bob', session => 'ses_w', max_running => '0');
    is(claim('run_w', 'r1/1/a'), 'ok', 'max_running 0: no limit');

    run('run_n', status => 'started');
    is(claim('run_n', 'r1/1/a'), 'ok', 'a run without tenant or session: claimed');
    is($t->redis('EXISTS', ''), 0, '... and no key named ""');
};

##############################################################################

# running(run, [container]) with the keys the runner passes
sub running {
    my ($id, $ct) = @_;
    my $h = hash("${P}run:$id");
    return script('running',
        [ "${P}run:$id", "${P}run:$id:events", "${P}run:$id",
          defined $h->{session} ? "${P}session:$h->{session}:active" : '',
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}:started" : '',
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}:claimed" : '',
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}" : '' ],
        [ $now, $ct // ('c' x 64), 100000, $now + 60000, $id ]);
}

subtest 'running: once its container runs, unless cancelled meanwhile' => sub {
    created('run_s', tenant => 'frank', session => 'ses_s');
    is(claim('run_s', 'r1/1/a'), 'ok', 'claimed');
    my $tsub = $t->redis_connect;
    $tsub->subscribe("${P}tenant:frank");
    is(running('run_s'), 'ok', 'running: ok');
    is_deeply($tsub->next_message(2), [ "${P}tenant:frank", 'run_s running' ],
              "the tenant's channel: run id and status");
    my $h = hash("${P}run:run_s");
    is_deeply([@$h{qw(status started_at container_id deadline)}],
              ['running', $now, 'c' x 64, $now + 60000],
              'status, started_at, container_id, deadline');
    my $ev = $t->redis('XRANGE', "${P}run:run_s:events", '-', '+');
    my %last = @{ $ev->[-1][1] };
    is($last{data}, '{"status":"running"}', 'the event');
    is(running('run_s'), 'running', 'again: running (nothing changed)');
    ok($t->redis('SISMEMBER', "${P}tenant:frank:claimed", 'run_s'), '... still claimed');

    created('run_k', tenant => 'frank', session => 'ses_k');
    is(claim('run_k', 'r1/1/a'), 'ok', 'another one claimed');
    $t->redis('HSET', "${P}run:run_k", status => 'cancelled');
    $t->redis('ZREM', "${P}session:ses_k:active", 'run_k');   # as the cancel does
    $t->redis('SREM', "${P}tenant:frank:started", 'run_k');
    is(running('run_k'), 'cancelled', 'cancelled while its sandbox started: cancelled');
    ok(!$t->redis('SISMEMBER', "${P}tenant:frank:claimed", 'run_k'),
       '... and it left the tenant\'s claimed set');
    is(hash("${P}run:run_k")->{container_id}, undef, '... nothing written');
    is(running('run_gone'), 'missing', 'a run that is gone: missing');
};

##############################################################################

# finish(run, status, {fields}, diff) with the keys the runner passes
sub finish {
    my ($id, $status, $fields, $diff, $at) = @_;
    my $h = hash("${P}run:$id");
    my $ses = $h->{session} // '';
    my $ten = $h->{tenant};
    return script('finish',
        [ "${P}run:$id", "${P}run:$id:events", "${P}run:$id",
          defined $diff ? "${P}run:$id:diff" : '',
          $ses ne '' ? "${P}session:$ses:active" : '',
          defined $ten ? "${P}tenant:$ten:started" : '',
          defined $ten ? "${P}tenant:$ten:claimed" : '',
          $ses ne '' ? "${P}session:$ses" : '', "${P}sessions",
          defined $ten ? "${P}tenant:$ten:sessions" : '',
          defined $ten ? "${P}tenant:$ten" : '' ],
        [ $status, $at // $now, 100000, $id, $ses, %{ $fields || {} },
          defined $diff ? ($diff) : () ]);
}

subtest 'finish: outcome, the run sets, retention, session' => sub {
    created('run_f', tenant => 'carol', session => 'ses_f', retention => 100);
    is(claim('run_f', 'r1/1/a'), 'ok', 'claimed');
    $t->redis('HSET', "${P}run:run_f", status => 'running');
    $t->redis('SADD', "${P}tenant:carol:claimed", 'run_other');
    $t->redis('ZADD', "${P}session:ses_f:active", $now + 1, 'run_next');
    $t->redis('DEL', "${P}session:ses_f");
    $t->redis('HSET', "${P}session:ses_f", tenant => 'carol', idle_ttl => 3600);
    my $idx = '{"a.txt":[0,40]}';
    my $tsub = $t->redis_connect;
    $tsub->subscribe("${P}tenant:carol");
    is(finish('run_f', 'completed', { result => 'done', diff_index => $idx,
                                      diff_stat => '1 file changed, 1 insertion(+)' },
              "diff --git a/a.txt b/a.txt\n+x\n"), 'ok', 'finish: ok');
    my $h = hash("${P}run:run_f");
    is($h->{status}, 'completed', 'status');
    is_deeply($tsub->next_message(2), [ "${P}tenant:carol", 'run_f completed' ],
              "the tenant's channel: run id and status");
    is($h->{finished_at}, $now, 'finished_at');
    is($h->{result}, 'done', 'the fields given');
    is($h->{diff_index}, $idx, 'diff_index');
    is($h->{diff_stat}, '1 file changed, 1 insertion(+)', 'diff_stat');
    is($t->redis('GET', "${P}run:run_f:diff"), "diff --git a/a.txt b/a.txt\n+x\n", 'the diff');
    my $ev = $t->redis('XRANGE', "${P}run:run_f:events", '-', '+');
    my %last = @{ $ev->[-1][1] };
    is($last{data}, '{"status":"completed"}', 'the last event: the status');
    is_deeply(members("${P}tenant:carol:claimed"), ['run_other'],
              'the run left the tenant\'s claimed set');
    is_deeply($t->redis('ZRANGE', "${P}session:ses_f:active", 0, -1), ['run_next'],
              '... and its session\'s active set: the next run is first now');
    for my $k ("run:run_f", "run:run_f:events", "run:run_f:diff") {
        my $ttl = $t->redis('TTL', "$P$k");
        ok($ttl > 90 && $ttl <= 100, "$k expires after the retention ($ttl s)");
    }
    my $s = hash("${P}session:ses_f");
    is($s->{last_active}, $now, 'session: last_active = now');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_f'), $now + 3600 * 1000,
       'sessions: scored last_active + idle_ttl');
    is($t->redis('ZSCORE', "${P}tenant:carol:sessions", 'ses_f'), $now,
       'tenant:{tenant}:sessions: scored by the last activity');

    $t->redis('SADD', "${P}tenant:carol:started", 'run_f');
    $t->redis('SADD', "${P}tenant:carol:claimed", 'run_f');
    $t->redis('ZADD', "${P}session:ses_f:active", 1, 'run_f');
    is(finish('run_f', 'failed', { result => 'again' }, undef, $now + 5000), 'completed',
       'a second finish: the status it has');
    is(hash("${P}run:run_f")->{result}, 'done', '... nothing changed');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_f'), $now + 3600 * 1000,
       '... the session not bumped again');
    ok(!$t->redis('SISMEMBER', "${P}tenant:carol:started", 'run_f')
       && !$t->redis('SISMEMBER', "${P}tenant:carol:claimed", 'run_f')
       && !defined $t->redis('ZSCORE', "${P}session:ses_f:active", 'run_f'),
       '... but the run leaves the sets all the same');
};

subtest 'finish: no retention, no idle_ttl, expiring or missing sessions' => sub {
    run('run_g', tenant => 'carol', session => 'ses_g', status => 'running');
    $t->redis('HSET', "${P}session:ses_g", tenant => 'carol');
    is(finish('run_g', 'failed', { error => 'x' }, ''), 'ok', 'finish: ok');
    is($t->redis('TTL', "${P}run:run_g"), -1, 'no retention: the run is kept');
    is($t->redis('TTL', "${P}run:run_g:diff"), -1, '... its (empty) diff too');
    is(hash("${P}session:ses_g")->{last_active}, $now, 'session: last_active');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_g'), undef, 'no idle_ttl: not in sessions');

    run('run_h', tenant => 'carol', session => 'ses_h', status => 'running');
    $t->redis('HSET', "${P}session:ses_h", tenant => 'carol', idle_ttl => 60,
              state => 'expiring');
    is(finish('run_h', 'completed', {}), 'ok', 'a run of an expiring session');
    is(hash("${P}session:ses_h")->{last_active}, undef, '... does not bump it');
    is($t->redis('ZSCORE', "${P}tenant:carol:sessions", 'ses_h'), undef,
       '... nor list it in the tenant\'s sessions');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_h'), undef, '... nor score it');

    run('run_i', tenant => 'carol', session => 'ses_gone', status => 'running');
    is(finish('run_i', 'completed', {}), 'ok', 'a run whose session hash is gone');
    is($t->redis('EXISTS', "${P}session:ses_gone"), 0, '... does not make one');
    run('run_j', status => 'running');
    is(finish('run_j', 'completed', {}), 'ok', 'a run without tenant or session');
    is($t->redis('EXISTS', ''), 0, '... and no key named ""');
};

##############################################################################

# janitor_begin / janitor_end (session, instance, [now]) as the runner calls them
sub jbegin {
    my ($ses, $inst, $at) = @_;
    return script('janitor_begin',
        [ "${P}session:$ses", "${P}session:$ses:active", "${P}sessions" ],
        [ $ses, $at // $now, $inst, 600000 ]);
}

sub jend {
    my ($ses, $inst, $at) = @_;
    return script('janitor_end',
        [ "${P}session:$ses", "${P}session:$ses:runs", "${P}sessions" ],
        [ $ses, $at // $now, $inst, 2592000 ]);
}

subtest 'janitor: an idle session expires once' => sub {
    my $ses = 'ses_j1';
    $t->redis('HSET', "${P}session:$ses", tenant => 'dave', idle_ttl => 60, retention => 300);
    $t->redis('ZADD', "${P}session:$ses:runs", 1, 'run_j1', 2, 'run_j2');
    $t->redis('ZADD', "${P}session:$ses:active", 2, 'run_j2');
    is(jbegin($ses, 'a/1/x'), 'not due', 'not in sessions: not due');
    $t->redis('ZADD', "${P}sessions", $now + 1000, $ses);
    is(jbegin($ses, 'a/1/x'), 'not due', 'scored in the future: not due');
    $t->redis('ZADD', "${P}sessions", $now - 1000, $ses);
    is(jbegin($ses, 'a/1/x'), 'busy', 'due, with an unfinished run (session:{id}:active): busy');
    is(hash("${P}session:$ses")->{state}, undef, '... and left alone');
    $t->redis('ZREM', "${P}session:$ses:active", 'run_j2');   # its finish

    is(jbegin($ses, 'a/1/x'), 'ok', 'due, no run going: ok (runner a)');
    my $h = hash("${P}session:$ses");
    is($h->{state}, 'expiring', 'state expiring');
    is($h->{expiring_by}, 'a/1/x', 'marked by runner a');
    is(jbegin($ses, 'b/2/y'), 'taken', 'runner b at the same time: taken');
    is(jend($ses, 'b/2/y'), 'taken', 'runner b cannot end it either');
    is(jbegin($ses, 'a/1/x'), 'ok', 'runner a again (its volume was in use): ok');
    is(jend($ses, 'a/1/x', $now + 10), 'ok', 'runner a ends it');
    $h = hash("${P}session:$ses");
    is($h->{state}, 'expired', 'state expired');
    is($h->{expired_at}, $now + 10, 'expired_at');
    ok(!exists $h->{expiring_by} && !exists $h->{expiring_at}, 'the mark is gone');
    my ($t1, $t2) = map { $t->redis('TTL', $_) } "${P}session:$ses", "${P}session:$ses:runs";
    ok($t1 > 290 && $t1 <= 300 && $t2 > 290 && $t2 <= 300,
       "the session's keys live its retention (300 s): $t1, $t2");
    is($t->redis('ZSCORE', "${P}sessions", $ses), undef, 'out of sessions');
    is(jbegin($ses, 'b/2/y'), 'not due', 'runner b, afterwards: not due');

    $t->redis('ZADD', "${P}sessions", $now - 1000, $ses);
    is(jbegin($ses, 'b/2/y'), 'expired', 'an expired session found due again: dropped');
    is($t->redis('ZSCORE', "${P}sessions", $ses), undef, '... from sessions');
};

subtest 'janitor: a dead runner\'s mark, orphans, the default retention' => sub {
    my $ses = 'ses_j2';
    $t->redis('HSET', "${P}session:$ses", tenant => 'dave');
    $t->redis('ZADD', "${P}sessions", $now - 1000, $ses);
    is(jbegin($ses, 'a/1/x'), 'ok', 'runner a marks it, then dies');
    is(jbegin($ses, 'b/2/y', $now + 1000), 'taken', 'runner b, soon after: taken');
    is(jbegin($ses, 'b/2/y', $now + 600001), 'ok', 'runner b, once the mark is stale: ok');
    is(hash("${P}session:$ses")->{expiring_by}, 'b/2/y', '... the mark is b\'s');
    is(jend($ses, 'a/1/x'), 'taken', 'runner a back: cannot end it');
    is(jend($ses, 'b/2/y'), 'ok', 'runner b ends it');
    my $ttl = $t->redis('TTL', "${P}session:$ses");
    ok($ttl > 2592000 - 10 && $ttl <= 2592000, "no retention field: 30 days ($ttl s)");

    $t->redis('ZADD', "${P}sessions", $now - 1000, 'ses_j3');
    is(jbegin('ses_j3', 'a/1/x'), 'orphan', 'due, its hash gone: orphan (its volume goes)');
    is(jend('ses_j3', 'a/1/x'), 'ok', '... then it leaves sessions');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_j3'), undef, '... gone');
    is($t->redis('EXISTS', "${P}session:ses_j3"), 0, '... no hash made');
};

##############################################################################
# the tenant's budgets (docs/contracts.md, "Tenant budgets")

my $USAGE = "${P}tenant:erin:usage";
my $EXPIRY = "${P}budget:expiry";

# finish with the tenant's usage and budget:expiry, as the runner passes them
sub finish_b {
    my ($id, $status, $fields, $diff) = @_;
    return script('finish',
        [ "${P}run:$id", "${P}run:$id:events", "${P}run:$id",
          defined $diff ? "${P}run:$id:diff" : '',
          "${P}session:ses_b:active", "${P}tenant:erin:started",
          "${P}tenant:erin:claimed", "${P}session:ses_b", "${P}sessions",
          "${P}tenant:erin:sessions", "${P}tenant:erin", $USAGE, $EXPIRY ],
        [ $status, $now, 100000, $id, 'ses_b', %{ $fields || {} },
          defined $diff ? ($diff) : () ]);
}

subtest 'budgets: the finish counts what it adds, and lists the run' => sub {
    $t->redis('DEL', $USAGE, $EXPIRY);
    $t->redis('HSET', $USAGE, bytes => 5000, sessions => 1, disk => 0, 's:ses_b' => 0);
    # an attempt of a group (run_create's group_runs): those ids count too
    run('run_b1', tenant => 'erin', session => 'ses_b', status => 'running',
        retention => 100, bytes => 1100, task => 'x' x 50, title => 't',
        group_runs => 'run_b1 run_b2');
    my %f = (result => 'done', error => '', diff_index => '{}');
    my $diff = "diff --git a/x b/x\n+" . ('y' x 1000) . "\n";
    is(finish_b('run_b1', 'completed', \%f, $diff), 'ok', 'finish: ok');
    my $added = 1024 + length('x' x 50) + length('t') + length('run_b1 run_b2') + 256
                + length(join '', %f) + length($diff);
    is(hash("${P}run:run_b1")->{bytes}, 1100 + $added,
       "the run's bytes: its events (counted as stored), its hash, task and group, the outcome ($added)");
    is(hash($USAGE)->{bytes}, 5000 + $added, "the tenant's usage gains the same");
    my $m = $t->redis('ZRANGE', $EXPIRY, 0, -1, 'WITHSCORES');
    is_deeply($m, [ 'run_b1 ' . (1100 + $added) . ' erin', $now + 100 * 1000 ],
              'budget:expiry: "<run> <bytes> <tenant>", scored when its keys expire');
    is(finish_b('run_b1', 'failed', { result => 'again' }), 'completed',
       'a second finish: the status it had');
    is(hash($USAGE)->{bytes}, 5000 + $added, '... nothing counted twice');
    is($t->redis('ZCARD', $EXPIRY), 1, '... nor listed twice');

    run('run_b2', tenant => 'erin', session => 'ses_b', status => 'running', bytes => 1100);
    is(finish_b('run_b2', 'completed', {}), 'ok', 'a run without retention');
    is($t->redis('ZCARD', $EXPIRY), 1,
       '... is not listed: its keys stay, and so do its bytes');
};

subtest 'budgets: budget_release takes an expired run\'s bytes off, once' => sub {
    my $member = 'run_b1 ' . hash("${P}run:run_b1")->{bytes} . ' erin';
    my $before = hash($USAGE)->{bytes};
    my $bytes = (split / /, $member)[1];
    is(script('budget_release', [ $EXPIRY, $USAGE ], [ $member, $bytes ]), 1,
       'released: 1');
    is(hash($USAGE)->{bytes}, $before - $bytes, "the tenant's usage lost the run's bytes");
    is($t->redis('ZCARD', $EXPIRY), 0, 'the member is gone');
    is(script('budget_release', [ $EXPIRY, $USAGE ], [ $member, $bytes ]), 0,
       'another runner at the same member: 0');
    is(hash($USAGE)->{bytes}, $before - $bytes, '... nothing taken twice');
    $t->redis('ZADD', $EXPIRY, $now, 'run_b9 999999 erin');
    is(script('budget_release', [ $EXPIRY, $USAGE ], [ 'run_b9 999999 erin', 999999 ]), 1,
       'more than the usage holds');
    is(hash($USAGE)->{bytes}, 0, '... the usage stops at 0');
};

subtest 'budgets: usage_disk and janitor_end keep the tenant\'s workspaces' => sub {
    $t->redis('DEL', $USAGE);
    $t->redis('HSET', $USAGE, sessions => 1, disk => 100, 's:ses_d1' => 100);
    is(script('usage_disk', [ $USAGE ], [ 'ses_d1', 700 ]), 700,
       'a listed session measured again: the disk moves by the difference');
    is(script('usage_disk', [ $USAGE ], [ 'ses_d2', 300 ]), 1000,
       'a session not listed yet (made before): listed, its bytes added');
    is_deeply(hash($USAGE), { sessions => 2, disk => 1000, 's:ses_d1' => 700,
                              's:ses_d2' => 300 }, 'the usage hash');
    my $ses = 'ses_d1';
    $t->redis('HSET', "${P}session:$ses", tenant => 'erin');
    $t->redis('ZADD', "${P}sessions", $now - 1000, $ses);
    is(jbegin($ses, 'a/1/x'), 'ok', 'the session is due: marked');
    is(script('janitor_end',
              [ "${P}session:$ses", "${P}session:$ses:runs", "${P}sessions", $USAGE ],
              [ $ses, $now, 'a/1/x', 2592000 ]), 'ok', 'expired');
    is_deeply(hash($USAGE), { sessions => 1, disk => 300, 's:ses_d2' => 300 },
              'it left its tenant\'s usage: one session less, its bytes off the disk');
    is(script('janitor_end',
              [ "${P}session:$ses", "${P}session:$ses:runs", "${P}sessions", $USAGE ],
              [ $ses, $now, 'a/1/x', 2592000 ]), 'ok', 'ended again');
    is_deeply(hash($USAGE), { sessions => 1, disk => 300, 's:ses_d2' => 300 },
              '... nothing taken twice');
};

subtest 'run_waiting: a queued run says why, once; running clears it' => sub {
    my $why = 'waiting for the host: the free disk of /x is below --min-free-disk';
    created('run_w', tenant => 'erin', session => 'ses_w');
    my @k = ("${P}run:run_w", "${P}run:run_w:events");
    is(script('run_waiting', \@k, [ $why, $now, 100000, 'started' ]), 1, 'said: 1');
    is(hash("${P}run:run_w")->{error}, $why, 'its error says why');
    my $ev = $t->redis('XRANGE', "${P}run:run_w:events", '-', '+');
    is(scalar(@$ev), 1, 'one event');
    is_deeply(json_decode({ @{ $ev->[0][1] } }->{data}), { waiting => $why },
              '... {"waiting": why}');
    is(script('run_waiting', \@k, [ $why, $now, 100000, 'started' ]), 0,
       'the same reason again: 0');
    is($t->redis('XLEN', "${P}run:run_w:events"), 1, '... no second event');
    is(claim('run_w', 'r1/1/a'), 'ok', 'claimed');
    is(running('run_w'), 'ok', 'running');
    is(hash("${P}run:run_w")->{error}, undef, 'running: the reason is gone');
    is(script('run_waiting', \@k, [ 'another', $now, 100000, 'started' ]), 0,
       'a running run: 0');
    is(hash("${P}run:run_w")->{error}, undef, '... nothing written');
};

##############################################################################
# a Redis with a password

subtest 'the runner and a Redis password' => sub {
    my $bin = $ENV{SMCP_TEST_RUNNER} || repo_root() . '/build/smcp-runner';
    plan skip_all => "$bin missing (run `make`)" unless -x $bin;
    plan skip_all => 'no dockerd (the runner pings it first)'
        unless -S '/var/run/docker.sock';
    my $pw = 'pw-' . join('', map { ('a' .. 'z')[rand 26] } 1 .. 20) . " \x01\"x";
    my $pwfile = $t->dir . '/redis-password';
    open(my $fh, '>', $pwfile) or die "$pwfile: $!";
    print $fh "$pw\n";
    close $fh;
    $t->redis('CONFIG', 'SET', 'requirepass', $pw);
    my $authed = sub {
        my $c = $t->redis_connect;
        $c->cmd('AUTH', $pw);
        return $c;
    };
    my $c = $authed->();
    $c->cmd('DEL', "${P}store-id", "${P}queue");

    my @base = ($bin, '--redis', '127.0.0.1:' . $t->redis_port,
                '--secret-file', $t->secret_file, '--egress-url', 'http://127.0.0.1:9',
                '--image', 'smcp-sandbox:none', '--network', 'none');
    my %run;
    for my $case (['nopw', []], ['wrong', ['--redis-password-file', "$pwfile.wrong"]],
                  ['file', ['--redis-password-file', $pwfile]], ['env', []]) {
        my ($name, $args) = @$case;
        if ($name eq 'wrong') {
            open(my $w, '>', "$pwfile.wrong") or die;
            print $w "not-$pw";
            close $w;
        }
        local $ENV{SMCP_REDIS_PASSWORD} = $name eq 'env' ? $pw : '';
        my $log = $t->dir . "/runner-$name.log";
        my $pid = $t->spawn("runner $name", $log, @base, '--name', "rt-pw-$name-$$", @$args);
        $run{$name} = { pid => $pid, log => $log };
    }

    ok(wait_until(20, sub { $t->read_file($run{nopw}{log}) =~ /level=error.*(NOAUTH|auth)/i }),
       'no password: a clear error') or diag($t->read_file($run{nopw}{log}));
    ok(wait_until(20, sub { $t->read_file($run{wrong}{log}) =~ /AUTH refused: WRONGPASS/ }),
       'a wrong password: "AUTH refused" and the server\'s words')
        or diag($t->read_file($run{wrong}{log}));
    ok(wait_until(20, sub { defined $c->cmd('GET', "${P}store-id") }),
       'with the password: the runner made the store id');
    my $groups = $c->cmd('XINFO', 'GROUPS', "${P}queue");
    ok(ref $groups && @$groups, 'and the consumer group on the queue');
    ok(wait_until(10, sub { (() = $c->cmd('CLIENT', 'LIST') =~ /cmd=xreadgroup/g) >= 2 }),
       'both runners with the password (file, environment) read the queue');
    for my $name (sort keys %run) {
        $t->stop_pid($run{$name}{pid}, 'TERM', 10);
        my $log = $t->read_file($run{$name}{log});
        unlike($log, qr/\Q$pw\E|pw-[a-z]{20}/, "runner $name: the password is not in its log");
    }
    $c->cmd('CONFIG', 'SET', 'requirepass', '');
};

##############################################################################
# the runner's scripts go by EVALSHA: lost ones (SCRIPT FLUSH, a failover)
# are loaded again, and a Redis loading its dataset is waited for

subtest 'the runner and lost scripts, a Redis loading its dataset' => sub {
    my $bin = $ENV{SMCP_TEST_RUNNER} || repo_root() . '/build/smcp-runner';
    plan skip_all => "$bin missing (run `make`)" unless -x $bin;
    plan skip_all => 'no dockerd (the runner pings it first)'
        unless -S '/var/run/docker.sock';
    $t->redis('FLUSHALL');
    my $log = $t->dir . '/runner-scripts.log';
    my $pid = $t->spawn('runner scripts', $log, $bin,
        '--redis', '127.0.0.1:' . $t->redis_port, '--name', "rt-lua-$$",
        '--secret-file', $t->secret_file, '--egress-url', 'http://127.0.0.1:9',
        '--image', 'smcp-sandbox:none', '--network', 'none',
        '--janitor-interval', 1);
    my $reading = sub {
        my $c = eval { $t->redis_connect(timeout => 1) } or return 0;
        return (eval { $c->cmd('CLIENT', 'LIST') } // '') =~ /cmd=xreadgroup/;
    };
    ok(wait_until(20, $reading), 'the runner reads the queue')
        or diag($t->read_file($log));

    # a run another runner has just claimed: the claim script says so
    my $n = 0;
    my $skip = sub {
        my $id = sprintf('run_%024x', ++$n);
        run($id, tenant => 'erin', session => 'ses_' . ('e' x 24),
            status => 'started', claimed_by => 'other/1/x',
            claimed_at => int(time() * 1000));
        $t->redis('XADD', "${P}queue", '*', run => $id);
        return wait_until(20, sub { $t->read_file($log) =~ /run=$id msg="claimed by another runner"/ });
    };

    # an expired session found due: the janitor's script drops it
    my $expired = sub {
        my ($ses) = @_;
        $t->redis('HSET', "${P}session:$ses", tenant => 'erin', state => 'expired');
        $t->redis('ZADD', "${P}sessions", int(time() * 1000) - 1000, $ses);
        return wait_until(20, sub { !defined $t->redis('ZSCORE', "${P}sessions", $ses) });
    };
    ok($expired->('ses_' . ('1' x 24)), 'the janitor runs its scripts')
        or diag($t->read_file($log));

    $t->redis('SCRIPT', 'FLUSH');
    ok($expired->('ses_' . ('2' x 24)),
       'after SCRIPT FLUSH: the janitor\'s script still runs, on its connection')
        or diag($t->read_file($log));
    like($t->read_file($log), qr/lost the script janitor_begin \(NOSCRIPT\): loading it again/,
         '... loaded again on NOSCRIPT, and the log says so');
    ok($skip->(), '... and the claim script (a new connection loads them all)')
        or diag($t->read_file($log));

    # a dataset that takes seconds to load (key-load-delay: us per key)
    $t->redis('EVAL', "for i = 1, 50000 do redis.call('SET', 'fill:' .. i, 'x') end", 0);
    $t->redis('SAVE');
    $t->stop_redis;
    my $rdir = $t->dir . '/redis';
    my $slow = $t->spawn('redis-server loading', "$rdir/stdout.log",
        'redis-server', "$rdir/redis.conf", '--dbfilename', 'dump.rdb',
        '--key-load-delay', 100, '--loading-process-events-interval-bytes', 1024);
    my $loading = wait_until(10, sub {
        my $c = eval { $t->redis_connect(timeout => 1) } or return 0;
        my $r = eval { $c->cmd('PING') };
        return !defined $r && ($@ // '') =~ /LOADING/;
    }, 0.05);
    ok($loading, 'Redis restarted, loading its dataset (LOADING)');
    ok(wait_until(20, sub { $t->read_file($log) =~
                            /redis is loading its dataset into memory \(LOADING\): waiting for it/ }),
       'the runner says it waits for Redis to load')
        or diag($t->read_file($log));
    ok(wait_until(30, sub { $t->read_file($log) =~ /redis has loaded its dataset: going on/ }),
       '... and when it is loaded')
        or diag($t->read_file($log));
    ok(wait_until(20, $reading), 'the runner reads the queue again');
    ok($skip->(), 'its scripts run');
    unlike($t->read_file($log), qr/level=(crit|alert)/, 'no alert in its log');

    $t->stop_pid($pid, 'TERM', 10);
    $t->stop_pid($slow, 'TERM', 10);
    unlink("$rdir/dump.rdb");
    $t->start_redis;
};

##############################################################################
# the runner repairs what a missed status change leaves in the run sets,
# and lists runs queued before session:{id}:active existed

subtest 'the runner and stale run sets, unlisted runs' => sub {
    my $bin = $ENV{SMCP_TEST_RUNNER} || repo_root() . '/build/smcp-runner';
    plan skip_all => "$bin missing (run `make`)" unless -x $bin;
    plan skip_all => 'no dockerd (the runner pings it first)'
        unless -S '/var/run/docker.sock';
    require SMCP::Docker;
    $t->redis('FLUSHALL');
    my $tn = "gina$$";
    my @ses = map { sprintf('ses_%016x%08x', $$, $_) } 1 .. 3;
    my @run = map { sprintf('run_%016x%08x', $$, $_) } 1 .. 4;
    my $at = int(time() * 1000);

    # 1. the tenant's claimed set holds a run that ended: max_running 1
    run($run[3], tenant => $tn, status => 'completed');
    $t->redis('SADD', "${P}tenant:$tn:claimed", $run[3]);
    created($run[0], tenant => $tn, session => $ses[0], max_running => 1,
            created_at => $at);
    # 2. its session's active set holds an earlier run that is gone
    $t->redis('ZADD', "${P}session:$ses[1]:active", 1, 'run_' . ('0' x 24));
    created($run[1], tenant => $tn, session => $ses[1], created_at => $at);
    # 3. a run an older nginx queued: in session:{id}:runs only, after an
    #    earlier unfinished run of its session
    run($run[2], tenant => $tn, session => $ses[2], status => 'started',
        created_at => $at);
    run('run_' . ('1' x 24), tenant => $tn, session => $ses[2], status => 'running',
        created_at => $at - 5);
    $t->redis('ZADD', "${P}session:$ses[2]:runs", $at - 5, 'run_' . ('1' x 24), $at, $run[2]);

    my $log = $t->dir . '/runner-sets.log';
    my $pid = $t->spawn('runner sets', $log, $bin,
        '--redis', '127.0.0.1:' . $t->redis_port, '--name', "rt-sets-$$",
        '--secret-file', $t->secret_file, '--egress-url', 'http://127.0.0.1:9',
        '--image', "smcp-sandbox:none-$$", '--network', 'none', '--concurrency', 3);
    $t->redis('XADD', "${P}queue", '*', run => $_) for @run[0 .. 2];

    ok(wait_until(30, sub { hash("${P}run:$run[0]")->{claimed_by} }),
       'a claimed set holding an ended run: the run is claimed all the same')
        or diag($t->read_file($log));
    like($t->read_file($log), qr/run=$run[3] msg="dropped from ${P}tenant:$tn:claimed: the run ended"/,
         '... the ended run dropped, and the log says so');
    ok(wait_until(30, sub { hash("${P}run:$run[1]")->{claimed_by} }),
       'an active set holding a run that is gone: the next run is claimed')
        or diag($t->read_file($log));
    ok(wait_until(20, sub {
           my $a = $t->redis('ZRANGE', "${P}session:$ses[2]:active", 0, -1, 'WITHSCORES');
           @$a == 4 && $a->[0] eq 'run_' . ('1' x 24) && $a->[2] eq $run[2];
       }), 'an unlisted run: its session\'s unfinished runs listed, by created_at')
        or diag(json_encode($t->redis('ZRANGE', "${P}session:$ses[2]:active", 0, -1)));
    is(hash("${P}run:$run[2]")->{claimed_by}, undef, '... and it waits for the earlier one');
    $t->redis('HSET', "${P}run:run_" . ('1' x 24), status => 'completed');
    ok(wait_until(30, sub { hash("${P}run:$run[2]")->{claimed_by} }),
       'the earlier one ended: the run is claimed')
        or diag($t->read_file($log));

    ok(wait_until(30, sub { !grep { (hash("${P}run:$_")->{status} // '') eq 'started' } @run[0 .. 2] }),
       'the runs ended (the image does not exist)');
    is_deeply([map { $t->redis('EXISTS', "${P}tenant:$tn:$_") } qw(started claimed)], [0, 0],
              '... the tenant\'s sets are empty');
    $t->stop_pid($pid, 'TERM', 10);
    SMCP::Docker::remove_volume("smcp-$_") for @ses;
};

$t->done;
