#!/usr/bin/env perl
# The runner's Redis scripts (runner/scripts/*.lua, the very files the
# runner embeds) run straight against redis-server, key by key: the
# contract of docs/contracts.md, "Limits, quotas and expiry".
#
#   claim.lua   the run still `started`, no other live claim, earlier runs
#               of the session ended, the tenant under `max_running`
#               (claimed members of tenant:{t}:active; ended or vanished
#               members dropped); `attempts` counted
#   finish.lua  the outcome once; the run leaves the active set; its keys
#               expire after `retention`; the session's last_active and its
#               `sessions` score (last_active + idle_ttl) bumped
#   janitor_begin.lua / janitor_end.lua   an idle session (due in
#               `sessions`, no started or running run) marked `expiring` by
#               one runner at a time (a dead runner's mark taken over when
#               stale), then `expired`, its keys kept `retention` more
#
# And the runner with a Redis that wants a password (--redis-password-file,
# $SMCP_REDIS_PASSWORD): AUTH on every connect, the password never logged
# (needs Docker: the runner pings dockerd first).
#
# Needs redis-server (and `make`); CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Test qw(json_decode json_encode wait_until repo_root);

my $t = SMCP::Test->new;
$t->start_redis;

my $P = 'smcp:';
my %LUA;
for my $f (glob(repo_root() . '/runner/scripts/*.lua')) {
    my ($name) = $f =~ m{([^/]+)\.lua$};
    $LUA{$name} = $t->read_file($f);
}

sub script {
    my ($name, $keys, $argv) = @_;
    die "no script $name\n" unless $LUA{$name};
    return $t->redis('EVAL', $LUA{$name}, scalar(@$keys), @$keys, @$argv);
}

sub hash { return $t->redis_hgetall(@_) }

my $STALE = 60000;
my $now = int(time() * 1000);

# claim(run, instance, [now]) with the keys the runner passes
sub claim {
    my ($id, $inst, $at) = @_;
    my $h = hash("${P}run:$id");
    return script('claim',
        [ "${P}run:$id",
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}:active" : '',
          defined $h->{session} ? "${P}session:$h->{session}:runs" : '' ],
        [ $id, $inst, $P, $at // $now, $STALE ]);
}

sub run {
    my ($id, %f) = @_;
    $t->redis('DEL', "${P}run:$id");
    $t->redis('HSET', "${P}run:$id", %f) if %f;
}

##############################################################################

subtest 'claim: status, other claims, attempts' => sub {
    is(claim('run_missing', 'r1/1/a'), 'missing', 'no run: missing');
    run('run_a', tenant => 'alice', session => 'ses_1', status => 'started');
    $t->redis('ZADD', "${P}session:ses_1:runs", 1, 'run_a');
    is(claim('run_a', 'r1/1/a'), 'ok', 'a started run: ok');
    my $h = hash("${P}run:run_a");
    is($h->{claimed_by}, 'r1/1/a', 'claimed_by: the runner process');
    is($h->{claimed_at}, $now, 'claimed_at: now');
    is($h->{attempts}, 1, 'attempts 1');
    is($t->redis('SISMEMBER', "${P}tenant:alice:active", 'run_a'), 1,
       'in the tenant\'s active set');
    is(claim('run_a', 'r2/2/b'), 'claimed', 'another runner, while the claim is fresh: claimed');
    is(hash("${P}run:run_a")->{attempts}, 1, '... attempts unchanged');
    is(claim('run_a', 'r2/2/b', $now + $STALE + 1), 'ok', 'once the claim is stale: ok');
    is(hash("${P}run:run_a")->{attempts}, 2, '... attempts 2');
    $t->redis('HSET', "${P}run:run_a", status => 'running');
    is(claim('run_a', 'r1/1/a'), 'running', 'a running run: running');
    $t->redis('HSET', "${P}run:run_a", status => 'cancelled');
    is(claim('run_a', 'r1/1/a'), 'cancelled', 'a cancelled run: cancelled');
};

subtest 'claim: runs of a session in order' => sub {
    run('run_b1', tenant => 'alice', session => 'ses_2', status => 'started');
    run('run_b2', tenant => 'alice', session => 'ses_2', status => 'started');
    $t->redis('ZADD', "${P}session:ses_2:runs", 1, 'run_b1', 2, 'run_b2');
    is(claim('run_b2', 'r1/1/a'), 'wait', 'the earlier run is started: wait');
    $t->redis('HSET', "${P}run:run_b1", status => 'running');
    is(claim('run_b2', 'r1/1/a'), 'wait', 'the earlier run is running: wait');
    is(hash("${P}run:run_b2")->{attempts}, undef, '... no attempt counted');
    $t->redis('HSET', "${P}run:run_b1", status => 'failed');
    is(claim('run_b2', 'r1/1/a'), 'ok', 'the earlier run ended: ok');
};

subtest 'claim: the tenant\'s running limit' => sub {
    my $act = "${P}tenant:bob:active";
    run('run_r1', tenant => 'bob', status => 'running', claimed_by => 'x/1/a',
        claimed_at => $now - 10 * $STALE);
    run('run_r2', tenant => 'bob', status => 'started', claimed_by => 'x/1/a',
        claimed_at => $now - 1000);
    run('run_r3', tenant => 'bob', status => 'started');
    run('run_r4', tenant => 'bob', status => 'started', claimed_by => 'x/1/a',
        claimed_at => $now - 2 * $STALE);
    run('run_r5', tenant => 'bob', status => 'completed', claimed_by => 'x/1/a',
        claimed_at => $now - 1000);
    run('run_r6');
    $t->redis('SADD', $act, map { "run_r$_" } 1 .. 6);
    run('run_x', tenant => 'bob', status => 'started', max_running => 2);
    $t->redis('SADD', $act, 'run_x');

    is(claim('run_x', 'r1/1/a'), 'wait',
       'max_running 2; one running, one freshly claimed: wait');
    is_deeply([sort @{ $t->redis('SMEMBERS', $act) }],
              [qw(run_r1 run_r2 run_r3 run_r4 run_x)],
              'the ended and the vanished members are dropped; unclaimed and '
              . 'stale-claimed started runs stay (not counted)');
    is(hash("${P}run:run_x")->{claimed_by}, undef, 'not claimed');
    $t->redis('HSET', "${P}run:run_r1", status => 'completed');
    is(claim('run_x', 'r1/1/a'), 'ok', 'the running one ended: ok');
    ok(!$t->redis('SISMEMBER', $act, 'run_r1'), '... and left the set');
    ok($t->redis('SISMEMBER', $act, 'run_x'), 'the claimed run is a member');

    run('run_y', tenant => 'bob', status => 'started', max_running => 2);
    is(claim('run_y', 'r1/1/a'), 'wait', 'now x and r2 are claimed: the next waits');
    run('run_z', tenant => 'bob', status => 'started');
    is(claim('run_z', 'r1/1/a'), 'ok', 'a run without max_running: no limit');
    run('run_w', tenant => 'bob', status => 'started', max_running => '0');
    is(claim('run_w', 'r1/1/a'), 'ok', 'max_running 0: no limit');

    run('run_n', status => 'started');
    is(claim('run_n', 'r1/1/a'), 'ok', 'a run without tenant or session: claimed');
    is($t->redis('EXISTS', ''), 0, '... and no key named ""');
};

##############################################################################

# finish(run, status, {fields}, diff) with the keys the runner passes
sub finish {
    my ($id, $status, $fields, $diff, $at) = @_;
    my $h = hash("${P}run:$id");
    my $ses = $h->{session} // '';
    return script('finish',
        [ "${P}run:$id", "${P}run:$id:events", "${P}run:$id",
          defined $diff ? "${P}run:$id:diff" : '',
          defined $h->{tenant} ? "${P}tenant:$h->{tenant}:active" : '',
          $ses ne '' ? "${P}session:$ses" : '', "${P}sessions" ],
        [ $status, $at // $now, 100000, $id, $ses, %{ $fields || {} },
          defined $diff ? ($diff) : () ]);
}

subtest 'finish: outcome, active set, retention, session' => sub {
    run('run_f', tenant => 'carol', session => 'ses_f', status => 'running',
        retention => 100);
    $t->redis('SADD', "${P}tenant:carol:active", 'run_f', 'run_other');
    $t->redis('DEL', "${P}session:ses_f");
    $t->redis('HSET', "${P}session:ses_f", tenant => 'carol', idle_ttl => 3600);
    my $idx = '{"a.txt":[0,40]}';
    is(finish('run_f', 'completed', { result => 'done', diff_index => $idx },
              "diff --git a/a.txt b/a.txt\n+x\n"), 'ok', 'finish: ok');
    my $h = hash("${P}run:run_f");
    is($h->{status}, 'completed', 'status');
    is($h->{finished_at}, $now, 'finished_at');
    is($h->{result}, 'done', 'the fields given');
    is($h->{diff_index}, $idx, 'diff_index');
    is($t->redis('GET', "${P}run:run_f:diff"), "diff --git a/a.txt b/a.txt\n+x\n", 'the diff');
    my $ev = $t->redis('XRANGE', "${P}run:run_f:events", '-', '+');
    my %last = @{ $ev->[-1][1] };
    is($last{data}, '{"status":"completed"}', 'the last event: the status');
    is_deeply($t->redis('SMEMBERS', "${P}tenant:carol:active"), ['run_other'],
              'the run left the tenant\'s active set');
    for my $k ("run:run_f", "run:run_f:events", "run:run_f:diff") {
        my $ttl = $t->redis('TTL', "$P$k");
        ok($ttl > 90 && $ttl <= 100, "$k expires after the retention ($ttl s)");
    }
    my $s = hash("${P}session:ses_f");
    is($s->{last_active}, $now, 'session: last_active = now');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_f'), $now + 3600 * 1000,
       'sessions: scored last_active + idle_ttl');

    is(finish('run_f', 'failed', { result => 'again' }, undef, $now + 5000), 'completed',
       'a second finish: the status it has');
    is(hash("${P}run:run_f")->{result}, 'done', '... nothing changed');
    is($t->redis('ZSCORE', "${P}sessions", 'ses_f'), $now + 3600 * 1000,
       '... the session not bumped again');
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
        [ "${P}session:$ses", "${P}session:$ses:runs", "${P}sessions" ],
        [ $ses, $at // $now, $inst, $P, 600000 ]);
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
    run('run_j1', tenant => 'dave', session => $ses, status => 'completed');
    run('run_j2', tenant => 'dave', session => $ses, status => 'running');
    is(jbegin($ses, 'a/1/x'), 'not due', 'not in sessions: not due');
    $t->redis('ZADD', "${P}sessions", $now + 1000, $ses);
    is(jbegin($ses, 'a/1/x'), 'not due', 'scored in the future: not due');
    $t->redis('ZADD', "${P}sessions", $now - 1000, $ses);
    is(jbegin($ses, 'a/1/x'), 'busy', 'due, with a running run: busy');
    $t->redis('HSET', "${P}run:run_j2", status => 'started');
    is(jbegin($ses, 'a/1/x'), 'busy', '... with a started run: busy');
    is(hash("${P}session:$ses")->{state}, undef, '... and left alone');
    $t->redis('HSET', "${P}run:run_j2", status => 'cancelled');

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

$t->done;
