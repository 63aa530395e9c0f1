#!/usr/bin/perl

# The module's Redis scripts (ngx_sandbox_mcp_module/common/scripts/, the
# very files the module embeds) run straight against redis-server: KEYS and
# ARGV in, the exact reply and the exact Redis state out, refusals writing
# nothing.  Every command a script runs is watched (MONITOR): each key it
# names (COMMAND GETKEYS; a PUBLISH's channel) is one of its KEYS - no key
# is built inside Lua.  docs/contracts.md, "Keys every script is handed".
#
#   session_create, session_touch, session_delete   MCP sessions
#   run_create   the run, its indexes, session:{id}:active,
#                tenant:{t}:started (refusing past max queued), the event,
#                the queue entry; refusing a run whose model or repository
#                needs a route the egress did not announce
#   run_cancel   a started run: cancelled, out of tenant:{t}:started and
#                session:{id}:active, its keys expiring; a running one
#                flagged; others unchanged
#   run_message, run_inbox   a message for a run's agent: queued in
#                run:{id}:inbox (a live run's, bounded, the run's TTL) and
#                an event; refused, nothing written, for an ended run, a
#                full inbox, a run sent its most, an egress without the
#                route `inbox`; the sandbox takes the oldest (delivered: an
#                event), a malformed one dropped
#   the tenant's budgets: run_create refuses a tenant at its bytes, disk or
#                (a new session) sessions budget, writing nothing, and
#                counts what a run holds in tenant:{t}:usage; a started
#                run's cancel lists it in budget:expiry
#   run_diff, run_events   pages of a run's diff and events
#   run_meter    a model request's metered usage added to its run's
#                totals: only the token tenant's run, never made anew
#   ui_events    the dashboard's stream: a page of events with the status
#   subscribe    an MCP session's resource subscription, bounded
#   oauth_client, oauth_code, oauth_grant, oauth_pending   the OAuth
#                authorization server: clients (unused ones bounded, out of
#                the bound at their first sign-in), codes (spent on first
#                use, a reuse revoking their family), refresh families
#                (rotation, reuse revoking the family and its last access
#                token; a GitHub sign-in's asking GitHub again first), GitHub
#                sign-ins under way (bounded), which rule lets a GitHub user
#                in (bound to ids: renames change nothing)
#   revoke, revoked_load   revoked token ids: stored with their exp and
#                indexed by it, the expired dropped on the way, a tenant's
#                budget; a worker's copy, or their number past its maximum
#
# Needs redis-server; CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_decode lua_script repo_root);

my $t = SMCP::Test->new;
$t->start_redis;

my $P = 'smcp:';
my $dir = repo_root() . '/ngx_sandbox_mcp_module/common/scripts';
my %LUA;
for my $name (qw(session_create session_touch session_delete run_create
                 run_cancel run_diff run_events ui_events subscribe
                 oauth_client oauth_code oauth_grant oauth_pending revoke
                 revoked_load oauth_github run_message run_inbox
                 run_attempts run_pick run_meter)) {
    $LUA{$name} = lua_script($dir, $name);
}

###############################################################################
# helpers

my $mon = $t->redis_connect;
$mon->send_cmd('MONITOR');
is($mon->read_reply(5), 'OK', 'MONITOR');
my $marker = 0;

# the arguments of a MONITOR line: "<ts> [0 lua] "CMD" "arg" ..."
sub monitor_args {
    my ($line) = @_;
    my @a;
    while ($line =~ /"((?:[^"\\]|\\.)*)"/g) {
        my $v = $1;
        $v =~ s/\\x([0-9a-f]{2})/chr(hex($1))/ge;
        $v =~ s/\\n/\n/g;
        $v =~ s/\\r/\r/g;
        $v =~ s/\\t/\t/g;
        $v =~ s/\\(.)/$1/g;
        push @a, $v;
    }
    return @a;
}

# the commands scripts ran since the last call
sub lua_commands {
    my $m = 'marker-' . ++$marker;
    $t->redis('ECHO', $m);
    my @cmds;
    while (1) {
        my $l = $mon->read_reply(5);
        die "MONITOR: no marker\n" if ref $l;
        last if index($l, "\"ECHO\" \"$m\"") >= 0;
        push @cmds, [ monitor_args($l) ] if $l =~ /\[\d+ lua\]/;
    }
    return @cmds;
}

# every key of the whole db, with its content and whether it expires
sub state {
    my %s;
    for my $k ($t->redis_keys('*')) {
        my $type = $t->redis('TYPE', $k);
        my $v;
        if ($type eq 'string') { $v = $t->redis('GET', $k) }
        elsif ($type eq 'hash') { $v = { @{ $t->redis('HGETALL', $k) } } }
        elsif ($type eq 'zset') { $v = $t->redis('ZRANGE', $k, 0, -1, 'WITHSCORES') }
        elsif ($type eq 'set') { $v = [ sort @{ $t->redis('SMEMBERS', $k) } ] }
        elsif ($type eq 'list') { $v = $t->redis('LRANGE', $k, 0, -1) }
        elsif ($type eq 'stream') {
            $v = [ map { { @{ $_->[1] } } } @{ $t->redis('XRANGE', $k, '-', '+') } ];
        }
        $s{$k} = { type => $type, value => $v,
                   expires => $t->redis('PTTL', $k) > 0 ? 1 : 0 };
    }
    return \%s;
}

# script(name, keys, argv) -> (reply, state before, state after); checks
# that the script named no key but its KEYS and wrote no other key
my $name_of_test = '';
my @LAST_CMDS;    # the commands the last script() ran
sub script {
    my ($name, $keys, $argv) = @_;
    my $before = state();
    lua_commands();
    my $r = eval { $t->redis('EVAL', $LUA{$name}, scalar(@$keys), @$keys, @$argv) };
    $r = { error => $@ } if $@;
    my %k = map { $_ => 1 } grep { length } @$keys;
    my @bad;
    @LAST_CMDS = lua_commands();
    for my $c (@LAST_CMDS) {
        my @named;
        if (uc $c->[0] eq 'PUBLISH') {
            @named = ($c->[1]);
        } else {
            my $g = eval { $t->redis('COMMAND', 'GETKEYS', @$c) };
            @named = @{ $g || [] };
        }
        push @bad, "$c->[0] $_" for grep { !$k{$_} } @named;
    }
    ok(!@bad, "$name: every key it named came in KEYS") or diag(join("\n", @bad));
    my $after = state();
    my @other = grep { !$k{$_} } sort keys %{{ %$before, %$after }};
    my @changed = grep {
        !defined $before->{$_} || !defined $after->{$_}
        || !Test::More::_deep_check($before->{$_}, $after->{$_})
    } @other;
    ok(!@changed, "$name: wrote no key but its KEYS") or diag("@changed");
    return ($r, $before, $after);
}

sub unchanged {
    my ($before, $after, $what) = @_;
    is_deeply($after, $before, "$what: nothing written");
}

my $now = int(time() * 1000);

###############################################################################
# MCP sessions

my $S = "${P}mcp:" . ('a' x 64);
my $REV = "${P}revoked";

subtest 'session_create' => sub {
    my ($r, $b, $a) = script('session_create', [ $S, $REV ],
        [ 'alice', '2025-11-25', 'cli', '1.0', $now, 60000, '' ]);
    is($r, 1, 'a new session: 1');
    is_deeply($a->{$S}{value}, { tenant => 'alice', protocol => '2025-11-25',
                                 client_name => 'cli', client_version => '1.0',
                                 created_at => $now }, '... its hash');
    my $ttl = $t->redis('PTTL', $S);
    # the ttl given, less what the reads since took (a loaded machine)
    ok($ttl > 50000 && $ttl <= 60000, "... expiring in the ttl ($ttl ms)");
    is(scalar(keys %$a), 1, '... the only key');

    ($r, $b, $a) = script('session_create', [ $S, $REV ],
        [ 'bob', '2025-06-18', 'x', '2', $now, 60000, '' ]);
    is($r, 0, 'the id taken: 0');
    unchanged($b, $a, 'the id taken');

    $t->redis('HSET', $REV, 'jti-1', time() + 3600);
    my $S2 = "${P}mcp:" . ('b' x 64);
    ($r, $b, $a) = script('session_create', [ $S2, $REV ],
        [ 'alice', '2025-11-25', 'cli', '1.0', $now, 60000, 'jti-1' ]);
    is($r, 'REVOKED', 'a revoked token id: REVOKED');
    unchanged($b, $a, 'revoked');
    ($r) = script('session_create', [ $S2, $REV ],
        [ 'alice', '2025-11-25', 'cli', '1.0', $now, 60000, 'jti-2' ]);
    is($r, 1, 'another token id: created');
    $t->redis('DEL', $S2);
};

subtest 'session_touch' => sub {
    $t->redis('PEXPIRE', $S, 1000);
    my ($r, $b, $a) = script('session_touch', [ $S, $REV ], [ 'alice', 90000, '' ]);
    is($r, '2025-11-25', "the tenant's own: its protocol version");
    ok($t->redis('PTTL', $S) > 89000, '... and its ttl refreshed');
    is_deeply($a->{$S}{value}, $b->{$S}{value}, '... its hash unchanged');

    # more than half the ttl left: a lookup is a read, nothing written
    $t->redis('PEXPIRE', $S, 60000);
    ($r, $b, $a) = script('session_touch', [ $S, $REV ], [ 'alice', 90000, '' ]);
    is($r, '2025-11-25', 'more than half the ttl left: its version');
    my $pttl = $t->redis('PTTL', $S);
    ok($pttl <= 60000 && $pttl > 50000, '... its ttl left as it was')
        or diag("pttl $pttl");
    my @w = grep { $_->[0] !~ /^(?:HMGET|PTTL|HEXISTS)$/i } @LAST_CMDS;
    ok(!@w, '... and the script ran only reads (HMGET, PTTL)')
        or diag(join(' | ', map { "@$_" } @w));

    # just under half left: refreshed
    $t->redis('PEXPIRE', $S, 44000);
    ($r) = script('session_touch', [ $S, $REV ], [ 'alice', 90000, '' ]);
    ok($t->redis('PTTL', $S) > 89000, 'less than half the ttl left: refreshed');
    ok((grep { uc $_->[0] eq 'PEXPIRE' } @LAST_CMDS), '... by a PEXPIRE');

    $t->redis('PEXPIRE', $S, 5000);
    ($r, $b, $a) = script('session_touch', [ $S, $REV ], [ 'bob', 90000, '' ]);
    is($r, undef, "another tenant's: nil");
    ok($t->redis('PTTL', $S) <= 5000, '... its ttl not refreshed');
    unchanged($b, $a, "another tenant's");

    my $U = "${P}mcp:" . ('c' x 64);
    ($r, $b, $a) = script('session_touch', [ $U, $REV ], [ 'alice', 90000, '' ]);
    is($r, undef, 'unknown: nil');
    unchanged($b, $a, 'unknown');

    ($r, $b, $a) = script('session_touch', [ $S, $REV ], [ 'alice', 90000, 'jti-1' ]);
    is($r, 'REVOKED', 'revoked: REVOKED');
    ok($t->redis('PTTL', $S) <= 5000, '... no ttl refreshed');

    $t->redis('HDEL', $S, 'protocol');
    ($r) = script('session_touch', [ $S, $REV ], [ 'alice', 90000, '' ]);
    is($r, '', "no protocol stored: ''");
};

subtest 'session_delete' => sub {
    my ($r, $b, $a) = script('session_delete', [ $S, $REV ], [ 'bob', 0, '' ]);
    is($r, 0, "another tenant's: 0");
    unchanged($b, $a, "another tenant's");
    ($r, $b, $a) = script('session_delete', [ $S, $REV ], [ 'alice', 0, 'jti-1' ]);
    is($r, 'REVOKED', 'revoked: REVOKED');
    unchanged($b, $a, 'revoked');
    ($r, $b, $a) = script('session_delete', [ $S, $REV ], [ 'alice', 0, '' ]);
    is($r, 1, "the tenant's own: 1");
    ok(!exists $a->{$S}, '... gone');
    ($r) = script('session_delete', [ $S, $REV ], [ 'alice', 0, '' ]);
    is($r, 0, 'again: 0');
};

$t->redis('FLUSHALL');

###############################################################################
# run_create

sub id { my ($p, $c) = @_; return $p . ($c x 24) }

# the module's KEYS; usage => the tenant's usage hash (KEYS[12]; '': no
# budgets), then egress:routes
sub create_keys {
    my ($run, $tenant, $ses, %o) = @_;
    return [ "${P}run:$run", "${P}run:$run:events", "${P}runs:$tenant",
             "${P}session:$ses", "${P}session:$ses:runs",
             "${P}session:$ses:active", "${P}tenant:$tenant:started",
             "${P}sessions", "${P}queue", "${P}tenant:$tenant:sessions",
             "${P}tenant:$tenant", $o{usage} // '', "${P}egress:routes" ];
}

# the module's ARGV; %o overrides by name
sub create_argv {
    my (%o) = @_;
    my %a = (run => id('run_', '1'), tenant => 'alice', session => id('ses_', '1'),
             new => 1, now => $now, task => 'fix it', repository => '',
             branch => '', model => 'p/m', title => 'fix it', create_pr => 0,
             timeout => 3600, maxlen => 100000, max_queued => 2,
             max_running => 4, max_cost => '25', retention => 2592000,
             idle_ttl => 604800, idle_at => $now + 604800000,
             trim => $now - 1000000, started => 'started',
             expiring => 'expiring', expired => 'expired', base_branch => '',
             pr_title => '', draft => 0,
             watch_base => 'https://mcp.test/ui/runs/' . ($o{run} // id('run_', '1')),
             max_repos => 3, sessions_trim => $now - 2000000, image => '',
             grants => '*', max_bytes => 0, max_sessions => 0, max_disk => 0,
             route => '', %o);
    my @argv = @a{qw(run tenant session new now task repository branch model
                     title create_pr timeout maxlen max_queued max_running
                     max_cost retention idle_ttl idle_at trim started
                     expiring expired base_branch pr_title draft watch_base
                     max_repos sessions_trim image grants max_bytes
                     max_sessions max_disk route)};
    # an older caller: an argument => undef leaves it out and those after it
    my ($cut) = grep { !defined $argv[$_] } 0 .. $#argv;
    splice(@argv, $cut) if defined $cut;
    return \@argv;
}

sub create {
    my (%o) = @_;
    my $run = $o{run} // id('run_', '1');
    my $ten = $o{tenant} // 'alice';
    my $ses = $o{session} // id('ses_', '1');
    return script('run_create', create_keys($run, $ten, $ses), create_argv(%o));
}

subtest 'run_create: a new session' => sub {
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}run:" . id('run_', '1'));
    my $tsub = $t->redis_connect;
    $tsub->subscribe("${P}tenant:alice");
    my $run = id('run_', '1');
    my $ses = id('ses_', '1');
    my ($r, $b, $a) = create();
    is($r, 1, 'created: 1');
    is_deeply($a->{"${P}run:$run"}{value}, {
        tenant => 'alice', session => $ses, task => 'fix it',
        repository => '', branch => '', model => 'p/m', title => 'fix it',
        create_pr => 0, timeout => 3600, status => 'started',
        created_at => $now, max_running => 4, max_cost => 25,
        retention => 2592000, repositories => '[]', base_branch => '',
        pr_title => '', draft => 0, image => '', agent => 'opencode',
        watch_base => "https://mcp.test/ui/runs/$run" }, 'the run hash');
    is_deeply($a->{"${P}session:$ses"}{value}, {
        tenant => 'alice', created_at => $now, last_run => $run,
        last_active => $now, idle_ttl => 604800, retention => 2592000,
        repositories => '[]', agent => 'opencode' },
        'the session hash (an older caller: agent opencode)');
    is_deeply($a->{"${P}tenant:alice:sessions"}{value}, [ $ses, $now ],
              "the tenant's sessions: by last activity");
    is_deeply($a->{"${P}sessions"}{value}, [ $ses, $now + 604800000 ],
              'sessions: due at last_active + idle_ttl');
    is_deeply($a->{"${P}runs:alice"}{value}, [ $run, $now ], "the tenant's index");
    is_deeply($a->{"${P}session:$ses:runs"}{value}, [ $run, $now ], "the session's index");
    is_deeply($a->{"${P}session:$ses:active"}{value}, [ $run, $now ],
              "the session's active set, by created_at");
    is_deeply($a->{"${P}tenant:alice:started"}{value}, [ $run ], "the tenant's started set");
    is_deeply($a->{"${P}run:$run:events"}{value},
              [ { type => 'lifecycle', data => '{"status":"started"}', ts => $now } ],
              'the first event');
    is_deeply($a->{"${P}queue"}{value}, [ { run => $run } ], 'the queue entry');
    is(scalar(keys %$a), 10, 'nothing else');
    ok(!grep({ $a->{$_}{expires} } keys %$a), 'nothing expires');
    is_deeply($tsub->next_message(2), [ "${P}tenant:alice", "$run started" ],
              "the tenant's channel: run id and status");
    # nobody can wait on the run before its id is answered: no ping there
    # (had there been one, it came first: one script, in order)
    is($sub->next_message(0.3), undef, 'no ping on run:{id}');
};

subtest 'run_create: an existing session' => sub {
    my $run = id('run_', '2');
    my $ses = id('ses_', '1');
    my ($r, $b, $a) = create(run => $run, new => 0, now => $now + 5,
                             idle_at => $now + 9, status => 'started');
    is($r, 1, 'created: 1');
    is_deeply($a->{"${P}session:$ses"}{value}, {
        tenant => 'alice', created_at => $now, last_run => $run,
        last_active => $now + 5, idle_ttl => 604800, retention => 2592000,
        repositories => '[]', agent => 'opencode' },
        'the session hash: created_at kept, last_run and last_active now');
    is_deeply($a->{"${P}tenant:alice:sessions"}{value}, [ $ses, $now + 5 ],
              "the tenant's sessions: the session's score is now");
    is_deeply($a->{"${P}session:$ses:active"}{value},
              [ id('run_', '1'), $now, $run, $now + 5 ], "the session's active set");
    is_deeply($a->{"${P}tenant:alice:started"}{value}, [ id('run_', '1'), $run ],
              'the started set');
};

# the MCP session that asks (KEYS[14], issue 25 point 5): its GET stream
# logs the lifecycle of the runs it started, the newest it remembers
subtest 'run_create: the MCP session that asks remembers its newest runs' => sub {
    my $mkey = "${P}mcp:" . ('ab' x 32) . ':runs';
    my $ses = id('ses_', '7');
    $t->redis('ZADD', $mkey, $now - 2, id('run_', 'a'), $now - 1, id('run_', 'b'));
    my $run = id('run_', '8');
    my ($r, $b, $a) = script('run_create',
        [ @{ create_keys($run, 'carol', $ses) }, $mkey ],
        [ @{ create_argv(run => $run, tenant => 'carol', session => $ses) }, 86400, 2 ]);
    is($r, 1, 'created: 1');
    is_deeply($a->{$mkey}{value}, [ id('run_', 'b'), $now - 1, $run, $now ],
              'the run in the MCP session\'s runs; past the most it remembers (2), '
              . 'the oldest gone');
    ok($a->{$mkey}{expires}, '... expiring as the MCP session does');
    # the same without KEYS[14]: no MCP session asks, nothing of one written
    my $run2 = id('run_', '9');
    ($r, $b, $a) = script('run_create', create_keys($run2, 'carol', $ses),
                          create_argv(run => $run2, tenant => 'carol', session => $ses,
                                      new => 0));
    is($r, 1, 'without KEYS[14]: created');
    is_deeply($a->{$mkey}{value}, $b->{$mkey}{value}, '... the MCP session\'s runs untouched');
};

subtest 'run_create: refusals write nothing' => sub {
    my $run = id('run_', '3');
    my ($r, $b, $a) = create(run => $run, max_queued => 2, new => 0);
    is($r, -2, 'max queued (2) runs started: -2');
    unchanged($b, $a, 'queue full');

    ($r, $b, $a) = create(run => $run, session => id('ses_', '9'), new => 0,
                          max_queued => 9);
    is($r, 0, 'an unknown session: 0');
    unchanged($b, $a, 'unknown session');

    ($r, $b, $a) = create(run => $run, tenant => 'bob', new => 0, max_queued => 9);
    is($r, 0, "another tenant's session: 0");
    unchanged($b, $a, "another tenant's session");

    ($r, $b, $a) = create(run => $run, new => 1, max_queued => 9);
    is($r, 0, 'a new session whose id is taken: 0');
    unchanged($b, $a, 'id taken');

    for my $state (qw(expiring expired)) {
        $t->redis('HSET', "${P}session:" . id('ses_', '1'), state => $state);
        ($r, $b, $a) = create(run => $run, new => 0, max_queued => 9);
        is($r, -1, "a session $state: -1");
        unchanged($b, $a, "session $state");
    }
    $t->redis('HDEL', "${P}session:" . id('ses_', '1'), 'state');

    # the names come from the module (smcp_keys.h), not from the script
    $t->redis('HSET', "${P}session:" . id('ses_', '1'), state => 'gone');
    ($r, $b, $a) = create(run => $run, new => 0, max_queued => 9, expired => 'gone');
    is($r, -1, "the state names are ARGV: 'gone' as expired: -1");
    $t->redis('HDEL', "${P}session:" . id('ses_', '1'), 'state');
};

# a fork (issue 26, point 2): KEYS 14-16 the forked session's hash,
# active and forks sets (the MCP session's runs, when asked, 17th);
# ARGV[41] the forked session, ARGV[42] how long its runs are held
sub fork_create {
    my (%o) = @_;
    my ($run, $ses, $f) = @o{qw(run session fork)};
    my $ten = $o{tenant} // 'dora';
    return script('run_create',
        [ @{ create_keys($run, $ten, $ses) },
          "${P}session:$f", "${P}session:$f:active", "${P}session:$f:forks" ],
        [ @{ create_argv(run => $run, tenant => $ten, session => $ses, new => 1,
                         max_queued => 99) },
          86400, 100, '', 'json', 900, $f, 900000 ]);
}

subtest 'run_create: a fork' => sub {
    my ($f, $ses, $run) = (id('ses_', 'f'), id('ses_', 'e'), id('run_', 'f'));
    my $repo = 'https://github.com/acme/app';
    $t->redis('HSET', "${P}session:$f", tenant => 'dora', created_at => $now - 500,
              last_active => $now - 100, repositories => qq(["$repo"]),
              opencode_session => 'ses_oc0123456789');

    $t->redis('ZADD', "${P}session:$f:active", $now - 50, id('run_', 'b'));
    my ($r, $b, $a) = fork_create(run => $run, session => $ses, fork => $f);
    is($r, -8, 'the forked session has a run queued or going: -8');
    unchanged($b, $a, 'busy');
    $t->redis('DEL', "${P}session:$f:active");

    ($r, $b, $a) = fork_create(run => $run, session => $ses, fork => id('ses_', 'd'));
    is($r, -9, 'an unknown session: -9');
    unchanged($b, $a, 'unknown');
    ($r, $b, $a) = fork_create(run => $run, session => $ses, fork => $f, tenant => 'erin');
    is($r, -9, "another tenant's session: -9, as an unknown one");
    unchanged($b, $a, "another tenant's");
    for my $state (qw(expiring expired)) {
        $t->redis('HSET', "${P}session:$f", state => $state);
        ($r, $b, $a) = fork_create(run => $run, session => $ses, fork => $f);
        is($r, -10, "a session $state: -10");
        unchanged($b, $a, "$state");
    }
    $t->redis('HDEL', "${P}session:$f", 'state');

    ($r, $b, $a) = fork_create(run => $run, session => $ses, fork => $f);
    is($r, 1, 'forked: 1');
    my $h = $a->{"${P}session:$ses"}{value};
    is($h->{fork_of}, $f, 'the new session: fork_of');
    is($h->{opencode_session}, 'ses_oc0123456789', '... the conversation to continue');
    is($h->{repositories}, qq(["$repo"]), "... the forked session's repositories");
    is($a->{"${P}run:$run"}{value}{fork_of}, $f, 'the run: fork_of');
    is($a->{"${P}run:$run"}{value}{repository}, $repo, '... its repository, the first');
    is_deeply($a->{"${P}session:$f:forks"}{value}, [ $run, $now + 900000 ],
              "the forked session's runs held until the copy (at most ARGV[42] ms)");
    ok($a->{"${P}session:$f:forks"}{expires}, '... the set expiring');
    # (dora's: the other subtests count alice's indexes)
    is($a->{"${P}session:$f"}{value}{last_active}, $now, 'the forked session active now');
    is($a->{"${P}session:$f"}{value}{opencode_session}, 'ses_oc0123456789',
       '... and otherwise as it was');
};

# attempts (issue 26, point 1): ARGV[43] N, then the agent's three (44-46),
# then run id, session id and
# run page of each attempt after the first; five keys each after every
# other key (the MCP session's runs, when asked, before them)
sub attempts_create {
    my (%o) = @_;
    my @runs = @{ $o{runs} };
    my @ses = @{ $o{sessions} };
    my $ten = 'gina';
    my @keys = @{ create_keys($runs[0], $ten, $ses[0],
                              usage => "${P}tenant:$ten:usage") };
    push @keys, "${P}mcp:" . ('g' x 64) . ':runs' if $o{mcp};
    my @extra;
    for my $i (1 .. $#runs) {
        push @keys, "${P}run:$runs[$i]", "${P}run:$runs[$i]:events",
            "${P}session:$ses[$i]", "${P}session:$ses[$i]:runs",
            "${P}session:$ses[$i]:active";
        push @extra, $runs[$i], $ses[$i], "https://mcp.test/ui/runs/$runs[$i]";
    }
    return script('run_create', \@keys,
        [ @{ create_argv(run => $runs[0], tenant => $ten, session => $ses[0],
                         new => $o{new} // 1, max_queued => $o{max_queued} // 9,
                         max_sessions => $o{max_sessions} // 0) },
          86400, 100, '', 'json', 900, '', 900000, scalar(@runs), '', '', '0',
          @extra ]);
}

subtest 'run_create: attempts' => sub {
    my @runs = map { 'run_' . ("${_}a" x 12) } qw(7 8 9);
    my @ses = map { 'ses_' . ("${_}a" x 12) } qw(7 8 9);
    my ($r, $b, $a) = attempts_create(runs => \@runs, sessions => \@ses, max_queued => 2);
    is($r, -2, 'three attempts, room for two queued runs: -2');
    unchanged($b, $a, 'the queue limit');
    ($r, $b, $a) = attempts_create(runs => \@runs, sessions => \@ses, max_sessions => 2);
    is($r, -6, 'three new sessions, a budget of two: -6');
    unchanged($b, $a, 'the sessions budget');
    $t->redis('HSET', "${P}session:$ses[2]", tenant => 'gina');
    ($r, $b, $a) = attempts_create(runs => \@runs, sessions => \@ses);
    is($r, 0, "the third attempt's session id taken: 0");
    unchanged($b, $a, 'a session id taken');
    $t->redis('DEL', "${P}session:$ses[2]");
    ($r, $b, $a) = attempts_create(runs => \@runs, sessions => \@ses, new => 0);
    like(ref $r eq 'HASH' ? $r->{error} : '', qr/attempts start new sessions/,
         'attempts in an existing session: an error');
    unchanged($b, $a, 'attempts in an existing session');

    ($r, $b, $a) = attempts_create(runs => \@runs, sessions => \@ses, max_queued => 3,
                                   max_sessions => 3, mcp => 1);
    is($r, 1, 'three attempts: created');
    for my $i (0 .. 2) {
        my $h = $a->{"${P}run:$runs[$i]"}{value};
        is_deeply([ @{$h}{qw(group group_attempt group_runs session watch_base status)} ],
                  [ $runs[0], $i + 1, "@runs", $ses[$i],
                    'https://mcp.test/ui/runs/' . $runs[$i], 'started' ],
                  "attempt " . ($i + 1) . ': its group, number, the attempts, '
                  . 'its own session and run page');
        ok(!exists $h->{attempts}, "... no `attempts` (claim.lua's count of its claims)");
        is($a->{"${P}session:$ses[$i]"}{value}{tenant}, 'gina', '... its session new');
        is_deeply([ @{ $a->{"${P}session:$ses[$i]:active"}{value} }[0] ], [ $runs[$i] ],
                  '... active in it');
    }
    is_deeply([ sort @{ $a->{"${P}tenant:gina:started"}{value} } ], [ sort @runs ],
              'all three queued for the tenant');
    is(scalar(grep { $_->[0] eq 'XADD' && $_->[1] eq "${P}queue" } @LAST_CMDS), 3,
       '... and on the queue');
    is($a->{"${P}tenant:gina:usage"}{value}{sessions}, 3, '... three sessions counted');
    my %mcp = @{ $a->{"${P}mcp:" . ('g' x 64) . ':runs'}{value} };
    is_deeply([ sort keys %mcp ], [ sort @runs ], 'the MCP session remembers all three');
};

# the agent (issue 26, point 3): ARGV[44] the agent named, [45] the agents
# offered "NAME=MODEL ...", [46] whether the call named its model
sub agent_create {
    my (%o) = @_;
    my ($run, $ses) = @o{qw(run session)};
    my $ten = $o{tenant} // 'kira';
    my @keys = @{ create_keys($run, $ten, $ses) };
    push @keys, "${P}session:$o{fork}", "${P}session:$o{fork}:active",
        "${P}session:$o{fork}:forks" if $o{fork};
    return script('run_create', \@keys,
        [ @{ create_argv(run => $run, tenant => $ten, session => $ses,
                         new => $o{new} // 1, max_queued => 99,
                         model => $o{model} // 'anthropic/claude-sonnet-4-5',
                         route => $o{route} // 'anthropic') },
          86400, 100, '', 'json', 900, $o{fork} // '', 900000, 1,
          $o{agent} // '', $o{offered} // 'opencode= claude-code= codex=openai/gpt-5-codex',
          $o{named} // '0' ]);
}

subtest 'run_create: the agent' => sub {
    my ($s1, $s2, $s3) = map { 'ses_' . ("${_}e" x 12) } qw(1 2 3);
    my @run = map { 'run_' . ("${_}c" x 12) } qw(1 2 3 4 5 6 7 8);
    $t->redis('SET', "${P}egress:routes", 'anthropic openai github');

    my ($r, $b, $a) = agent_create(run => $run[0], session => $s1, agent => 'codex',
                                   named => 1);
    is_deeply($r, [ 'agent', 'model', 'codex', 'anthropic/claude-sonnet-4-5' ],
              'codex with an Anthropic model named: refused, naming both');
    unchanged($b, $a, 'a model the agent does not run');

    ($r, $b, $a) = agent_create(run => $run[0], session => $s1, agent => 'claude-code',
                                offered => 'opencode=');
    is_deeply($r, [ 'agent', 'offered', 'claude-code' ], 'an agent not offered: refused');
    unchanged($b, $a, 'an agent not offered');

    ($r, $b, $a) = agent_create(run => $run[0], session => $s1, agent => 'codex');
    is($r, 1, 'codex, no model named: created');
    is($a->{"${P}run:$run[0]"}{value}{agent}, 'codex', 'the run: agent codex');
    is($a->{"${P}run:$run[0]"}{value}{model}, 'openai/gpt-5-codex', "... codex's own model");
    is($a->{"${P}session:$s1"}{value}{agent}, 'codex', 'the session keeps its agent');

    ($r, $b, $a) = agent_create(run => $run[1], session => $s1, new => 0, agent => 'opencode');
    is_deeply($r, [ 'agent', 'session', 'codex' ], "a follow-up naming another agent: refused");
    unchanged($b, $a, 'another agent in a session');

    $t->redis('SREM', "${P}tenant:kira:started", $run[0]);
    ($r, $b, $a) = agent_create(run => $run[1], session => $s1, new => 0,
                                model => 'openai/gpt-5.1', named => 1);
    is($r, 1, 'a follow-up naming no agent: created');
    is($a->{"${P}run:$run[1]"}{value}{agent}, 'codex', "... the session's agent");
    is($a->{"${P}run:$run[1]"}{value}{model}, 'openai/gpt-5.1', '... the model named');

    ($r, $b, $a) = agent_create(run => $run[2], session => $s1, new => 0,
                                offered => 'opencode= claude-code=');
    is_deeply($r, [ 'agent', 'offered', 'codex' ], "the session's agent no longer offered: refused");

    ($r, $b, $a) = agent_create(run => $run[3], session => $s2);
    is($r, 1, 'no agent named, a new session: created');
    is($a->{"${P}run:$run[3]"}{value}{agent}, 'opencode', '... the first offered');
    is($a->{"${P}run:$run[3]"}{value}{model}, 'anthropic/claude-sonnet-4-5',
       '... the model passed');

    ($r, $b, $a) = agent_create(run => $run[4], session => $s3, agent => 'codex',
                                offered => 'opencode= codex=openai/gpt-5-codex',
                                route => 'anthropic', tenant => 'kira');
    $t->redis('SET', "${P}egress:routes", 'anthropic github');
    ($r, $b, $a) = agent_create(run => $run[5], session => 'ses_' . ('4e' x 12), agent => 'codex');
    is_deeply($r, [ 'route', 'openai', 'anthropic github' ],
              "codex's own model needs the openai route, which the egress lacks");
    unchanged($b, $a, 'no route');
    $t->redis('SET', "${P}egress:routes", 'anthropic openai github');

    # a fork keeps its forked session's agent (s1 has no run going: done)
    $t->redis('DEL', "${P}session:$s1:active");
    ($r, $b, $a) = agent_create(run => $run[6], session => 'ses_' . ('5e' x 12), fork => $s1,
                                agent => 'claude-code');
    is_deeply($r, [ 'agent', 'session', 'codex' ], 'a fork naming another agent: refused');
    ($r, $b, $a) = agent_create(run => $run[7], session => 'ses_' . ('5e' x 12), fork => $s1);
    is($r, 1, 'a fork naming no agent: created');
    is($a->{"${P}session:" . 'ses_' . ('5e' x 12)}{value}{agent}, 'codex', "... the forked session's agent");

    ($r) = agent_create(run => 'run_' . ('9d' x 12), session => 'ses_' . ('6e' x 12),
                        agent => 'claude-code', model => 'anthropic/claude-opus-4', named => 1);
    is($r, 1, 'claude-code with an Anthropic model: created');
    $t->redis('DEL', "${P}egress:routes");
};

# run_attempts: KEYS each attempt's run hash, ARGV the tenant, the fields
subtest 'run_attempts' => sub {
    my @runs = map { 'run_' . ("${_}b" x 12) } qw(1 2 3);
    $t->redis('HSET', "${P}run:$runs[0]", tenant => 'hana', status => 'running',
              cost => '0.5');
    $t->redis('HSET', "${P}run:$runs[1]", tenant => 'ivan', status => 'completed');
    my ($r, $b, $a) = script('run_attempts', [ map { "${P}run:$_" } @runs ],
                             [ 'hana', 'status', 'cost', 'pr_url' ]);
    is_deeply($r, [ [ 'running', '0.5', undef ], [], [] ],
              "the tenant's attempt's fields (nil when absent); another tenant's and "
              . 'a gone one: empty');
    unchanged($b, $a, 'a read');
    $t->redis('DEL', map { "${P}run:$_" } @runs);
};

# run_pick: the attempt picked gets a run that opens its pull request;
# KEYS[14] the tenant's usage, ARGV[15..17] its bytes and disk budgets and
# the grants of the token that picks (old => 1: an older caller, none)
sub pick {
    my (%o) = @_;
    my ($g, $p, $n, $ses) = @o{qw(group attempt run session)};
    my $ten = $o{tenant} // 'hana';
    return script('run_pick',
        [ "${P}run:$g", "${P}run:$p", "${P}run:$n", "${P}run:$n:events",
          "${P}session:$ses", "${P}session:$ses:runs", "${P}session:$ses:active",
          "${P}tenant:$ten:started", "${P}runs:$ten", "${P}queue", "${P}tenant:$ten",
          "${P}sessions", "${P}tenant:$ten:sessions",
          $o{old} ? () : "${P}tenant:$ten:usage" ],
        [ $ten, $now, $g, $p, $n, $ses, 100, "https://mcp.test/ui/runs/$n",
          $o{max_queued} // 5, $now + 1000, 'started', 'completed', 'expiring',
          'expired',
          $o{old} ? () : ($o{max_bytes} // 0, $o{max_disk} // 0,
                          $o{grants} // 'acme/*') ]);
}

subtest 'run_pick' => sub {
    my @runs = map { 'run_' . ("${_}c" x 12) } qw(1 2);
    my @ses = map { 'ses_' . ("${_}c" x 12) } qw(1 2);
    my $new = 'run_' . ('9c' x 12);
    for my $i (0, 1) {
        $t->redis('HSET', "${P}run:$runs[$i]", tenant => 'hana', group => $runs[0],
                  group_runs => "@runs", group_attempt => $i + 1, session => $ses[$i],
                  status => 'completed', pr_status => 'pushed', title => 'Speed it up',
                  repository => 'https://github.com/acme/app',
                  repositories => '["https://github.com/acme/app"]', retention => 60);
        $t->redis('HSET', "${P}session:$ses[$i]", tenant => 'hana');
    }
    my %a = (group => $runs[0], attempt => $runs[1], run => $new, session => $ses[1]);
    my ($r, $b, $a) = pick(%a, tenant => 'ivan');
    is($r, 0, "another tenant's group: 0");
    unchanged($b, $a, "another tenant's");
    ($r, $b, $a) = pick(%a, group => $runs[1]);
    is($r, 0, 'a groupId that is not the first attempt: 0');
    unchanged($b, $a, 'not the group');
    ($r, $b, $a) = pick(%a, session => $ses[0]);
    is($r, 0, "another attempt's session: 0");
    unchanged($b, $a, 'another session');
    $t->redis('HSET', "${P}run:$runs[1]", pr_status => 'opened');
    ($r, $b, $a) = pick(%a);
    is_deeply($r, [ 'state', 'completed', 'opened' ], 'an attempt with no pushed branch waiting: state');
    unchanged($b, $a, 'not pushed');
    $t->redis('HSET', "${P}run:$runs[1]", pr_status => 'pushed');
    $t->redis('SADD', "${P}tenant:hana:started", map { "run_x$_" } 1 .. 5);
    ($r, $b, $a) = pick(%a);
    is($r, -2, 'the queue full: -2');
    unchanged($b, $a, 'queue full');
    $t->redis('DEL', "${P}tenant:hana:started");

    ($r, $b, $a) = pick(%a);
    is($r, 1, 'picked: 1');
    my $h = $a->{"${P}run:$new"}{value};
    is_deeply([ @{$h}{qw(pr_of group session create_pr draft status repository pr_title)} ],
              [ $runs[1], $runs[0], $ses[1], 1, 0, 'started', 'https://github.com/acme/app',
                'Speed it up' ],
              'the new run: the attempt it opens the pull request of, in its session');
    is($a->{"${P}run:$runs[0]"}{value}{picked}, $runs[1], 'the group: picked');
    is($a->{"${P}run:$runs[1]"}{value}{pr_status}, 'picked', 'the attempt: picked');
    ok((grep { $_ eq $new } @{ $a->{"${P}tenant:hana:started"}{value} }), '... queued');
    ($r, $b, $a) = pick(%a, run => 'run_' . ('8c' x 12));
    is_deeply($r, [ 'picked', $runs[1] ], 'a second pick: picked, naming the first');
    unchanged($b, $a, 'a second pick');
    $t->redis('DEL', map { ("${P}run:$_", "${P}run:$_:events") } @runs, $new);
    $t->redis('DEL', map { ("${P}session:$_", "${P}session:$_:runs", "${P}session:$_:active") } @ses);
    $t->redis('DEL', "${P}tenant:hana:started", "${P}runs:hana", "${P}tenant:hana:sessions");
};

subtest "run_pick: the token's grants, the tenant's budgets" => sub {
    my @runs = map { 'run_' . ("${_}e" x 12) } qw(1 2);
    my @ses = map { 'ses_' . ("${_}f" x 12) } qw(1 2);
    my $new = 'run_' . ('9e' x 12);
    for my $i (0, 1) {
        $t->redis('HSET', "${P}run:$runs[$i]", tenant => 'hana', group => $runs[0],
                  group_runs => "@runs", group_attempt => $i + 1, session => $ses[$i],
                  status => 'completed', pr_status => 'pushed', title => 'Two repos',
                  repository => 'https://github.com/Acme/App',
                  repositories => '["https://github.com/Acme/App",'
                                  . '"https://github.com/tools/lib"]');
        $t->redis('HSET', "${P}session:$ses[$i]", tenant => 'hana');
    }
    my %a = (group => $runs[0], attempt => $runs[1], run => $new, session => $ses[1]);
    for my $c ([ 'acme/app', 'https://github.com/tools/lib', 'one of the two' ],
               [ '', 'https://github.com/Acme/App', 'none' ],
               [ 'other/*,tools/lib', 'https://github.com/Acme/App', 'another owner' ],
               [ 'acme/app-x,tools/*', 'https://github.com/Acme/App', 'a longer name' ]) {
        my ($grants, $url, $what) = @$c;
        my ($r, $b, $a) = pick(%a, grants => $grants);
        is_deeply($r, [ 'grant', $url ], "grants \"$grants\" ($what): grant, naming $url");
        unchanged($b, $a, "grants \"$grants\"");
    }

    # the budgets, each 0: none; usage at the budget: refused
    $t->redis('HSET', "${P}tenant:hana:usage", bytes => 5000, disk => 9000);
    my ($r, $b, $a) = pick(%a, grants => 'acme/app,tools/lib', max_bytes => 5000);
    is($r, -5, 'the tenant at its bytes budget: -5');
    unchanged($b, $a, 'the bytes budget');
    ($r, $b, $a) = pick(%a, grants => '*', max_bytes => 5001, max_disk => 9000);
    is($r, -7, 'the tenant at its disk budget: -7');
    unchanged($b, $a, 'the disk budget');

    # an older caller (no usage key, no budgets, no grants): not checked
    ($r, $b, $a) = pick(%a, old => 1);
    is($r, 1, 'an older caller: picked');
    is($a->{"${P}run:$new"}{value}{pr_of}, $runs[1], '... the pick run');
    $t->redis('DEL', map { ("${P}run:$_", "${P}run:$_:events") } @runs, $new);
    $t->redis('HSET', "${P}run:$runs[$_]", tenant => 'hana', group => $runs[0],
              group_runs => "@runs", session => $ses[$_], status => 'completed',
              pr_status => 'pushed', repository => 'https://github.com/Acme/App',
              repositories => '["https://github.com/Acme/App"]') for 0, 1;
    ($r, $b, $a) = pick(%a, grants => 'acme/app', max_bytes => 5001, max_disk => 9001);
    is($r, 1, 'granted (compared without case), under both budgets: picked');
    is($a->{"${P}tenant:hana:usage"}{value}{bytes}, 5000, '... the usage read, not written');
    $t->redis('DEL', map { ("${P}run:$_", "${P}run:$_:events") } @runs, $new);
    $t->redis('DEL', map { ("${P}session:$_", "${P}session:$_:runs", "${P}session:$_:active") } @ses);
    $t->redis('DEL', "${P}tenant:hana:started", "${P}runs:hana", "${P}tenant:hana:sessions",
              "${P}tenant:hana:usage");
};

subtest 'run_cancel: a pick run cancelled before it started undoes its pick' => sub {
    my ($g, $p, $n) = map { 'run_' . ("${_}d" x 12) } qw(1 2 3);
    $t->redis('HSET', "${P}run:$g", tenant => 'hana', picked => $p);
    $t->redis('HSET', "${P}run:$p", tenant => 'hana', group => $g, pr_status => 'picked',
              pr_pick_run => $n);
    $t->redis('HSET', "${P}run:$n", tenant => 'hana', session => id('ses_', '1'),
              status => 'started', pr_of => $p, group => $g);
    my ($r, $b, $a) = script('run_cancel',
        [ @{ cancel_keys($n, 'hana', id('ses_', '1')) }, "${P}tenant:hana:usage",
          "${P}budget:expiry", "${P}notify", "${P}run:$p", "${P}run:$g" ],
        [ 'hana', $now, $n, 100000, 86400, id('ses_', '1'), 'started', 'running',
          'cancelled' ]);
    is({ @{ $r || [] } }->{status}, 'cancelled', 'cancelled');
    is($a->{"${P}run:$p"}{value}{pr_status}, 'pushed', 'the attempt waits for a pick again');
    ok(!exists $a->{"${P}run:$p"}{value}{pr_pick_run}, '... no pick run');
    ok(!exists $a->{"${P}run:$g"}{value}{picked}, '... the group without its pick');
    $t->redis('DEL', map { ("${P}run:$_", "${P}run:$_:events") } $g, $p, $n);
};

subtest 'run_create: ARGV statuses; old index entries trimmed' => sub {
    # one run in 16 trims: those whose id ends in 0
    my $run = 'run_' . ('4' x 23) . '0';
    my $ses = id('ses_', '4');
    $t->redis('ZADD', "${P}runs:alice", $now - 2000000, id('run_', 'a'));
    $t->redis('ZADD', "${P}tenant:alice:sessions", $now - 1500000, id('ses_', 'a'),
              $now - 2500000, id('ses_', 'b'));
    my $other = 'run_' . ('4' x 23) . 'f';
    my ($r, $b, $a) = create(run => $other, session => id('ses_', 'c'),
                             max_queued => 9);
    is($r, 1, 'a run whose id does not end in 0: created');
    ok((grep { $_ eq id('run_', 'a') } @{ $a->{"${P}runs:alice"}{value} })
       && (grep { $_ eq id('ses_', 'b') }
                @{ $a->{"${P}tenant:alice:sessions"}{value} }),
       '... and the old index entries kept');
    is(scalar(grep { uc $_->[0] eq 'ZREMRANGEBYSCORE' } @LAST_CMDS), 0,
       '... no trim run');
    $t->redis('DEL', "${P}run:$other", "${P}run:$other:events",
              "${P}session:" . id('ses_', 'c'), "${P}session:" . id('ses_', 'c') . ':runs',
              "${P}session:" . id('ses_', 'c') . ':active');
    $t->redis('ZREM', "${P}runs:alice", $other);
    $t->redis('ZREM', "${P}tenant:alice:sessions", id('ses_', 'c'));
    $t->redis('ZREM', "${P}sessions", id('ses_', 'c'));
    $t->redis('SREM', "${P}tenant:alice:started", $other);
    $t->redis('DEL', "${P}queue");
    ($r, $b, $a) = create(run => $run, session => $ses, max_queued => 9,
                          started => 'queued');
    is($r, 1, 'created');
    is($a->{"${P}run:$run"}{value}{status}, 'queued', 'the status name is ARGV');
    is_deeply($a->{"${P}run:$run:events"}{value}[0]{data}, '{"status":"queued"}',
              '... in the event too');
    is_deeply([ sort grep { /^run_/ } @{ $a->{"${P}runs:alice"}{value} } ],
              [ id('run_', '1'), id('run_', '2'), $run ],
              'an index entry older than the trim score is gone');
    is_deeply([ grep { /^ses_/ } @{ $a->{"${P}tenant:alice:sessions"}{value} } ],
              [ id('ses_', 'a'), $ses, id('ses_', '1') ],
              "tenant's sessions: the one older than the sessions' trim score is gone");
};

subtest 'run_create: repositories of a session' => sub {
    my $ses = id('ses_', '5');
    my ($A, $B, $C) = map { "https://github.com/acme/$_" } qw(a b c);
    my $run = id('run_', '5');
    my ($r, $b, $a) = create(run => $run, session => $ses, max_queued => 99,
                             repository => $A, create_pr => 1,
                             base_branch => 'develop', pr_title => 'Fix it',
                             draft => 1);
    is($r, 1, 'created');
    my $h = $a->{"${P}run:$run"}{value};
    is_deeply([ @$h{qw(repository repositories base_branch pr_title draft
                       create_pr)} ],
              [ $A, qq(["$A"]), 'develop', 'Fix it', 1, 1 ],
              'the run: its repository, the list, the pull request fields');
    is($a->{"${P}session:$ses"}{value}{repositories}, qq(["$A"]),
       "the session's repositories");

    $run = id('run_', '6');
    ($r, $b, $a) = create(run => $run, session => $ses, new => 0,
                          max_queued => 99, branch => 'feature',
                          create_pr => 1);
    is($r, 1, 'a follow-up naming no repository, with a branch and a PR');
    $h = $a->{"${P}run:$run"}{value};
    is_deeply([ @$h{qw(repository repositories branch)} ],
              [ $A, qq(["$A"]), 'feature' ],
              "... works on the session's first; its branch is stored");

    $run = id('run_', '7');
    ($r, $b, $a) = create(run => $run, session => $ses, new => 0,
                          max_queued => 99, repository => $B);
    is($r, 1, 'a follow-up naming another repository');
    $h = $a->{"${P}run:$run"}{value};
    is_deeply([ @$h{qw(repository repositories)} ], [ $B, qq(["$A","$B"]) ],
              '... works on it; the list grows, first named first');
    is($a->{"${P}session:$ses"}{value}{repositories}, qq(["$A","$B"]),
       "... in the session's too");

    $run = id('run_', '8');
    ($r, $b, $a) = create(run => $run, session => $ses, new => 0,
                          max_queued => 99,
                          repository => 'https://github.com/ACME/A');
    is($r, 1, 'a follow-up naming the first again, in other case');
    $h = $a->{"${P}run:$run"}{value};
    is_deeply([ @$h{qw(repository repositories)} ], [ $A, qq(["$A","$B"]) ],
              "... gets the session's spelling; no duplicate");

    ($r, $b, $a) = create(run => id('run_', '9'), session => $ses, new => 0,
                          max_queued => 99, repository => $C);
    is($r, 1, 'a third repository (the most: 3)');
    is($a->{"${P}session:$ses"}{value}{repositories},
       qq(["$A","$B","$C"]), '... listed');

    ($r, $b, $a) = create(run => id('run_', 'a'), session => $ses, new => 0,
                          max_queued => 99,
                          repository => 'https://github.com/acme/d');
    is($r, -3, 'a fourth: -3');
    unchanged($b, $a, 'too many repositories');

    ($r, $b, $a) = create(run => id('run_', 'a'), session => $ses, new => 0,
                          max_queued => 99, repository => $B);
    is($r, 1, 'one of the three still may be named');

    my $bare = id('ses_', '6');
    for my $o ([ branch => 'x' ], [ create_pr => 1 ]) {
        ($r, $b, $a) = create(run => id('run_', 'b'), session => $bare,
                              max_queued => 99, @$o);
        is($r, -4, "no repository at all, $o->[0]: -4");
        unchanged($b, $a, "no repository, $o->[0]");
    }
    ($r, $b, $a) = create(run => id('run_', 'b'), session => $bare,
                          max_queued => 99);
    is($r, 1, 'a session without repository');
    ($r, $b, $a) = create(run => id('run_', 'c'), session => $bare, new => 0,
                          max_queued => 99, branch => 'x');
    is($r, -4, '... its follow-up with a branch: -4');
    unchanged($b, $a, 'follow-up, no repository');
};

subtest 'run_create: every repository of the run is granted' => sub {
    # a follow-up fetches all of its session's repositories and works on
    # the first unless it names another: each is checked against the
    # token's grants (ARGV: lower case, without .git, ',' between them)
    my $ses = id('ses_', 'g');
    my ($A, $B) = ('https://github.com/Acme/App', 'https://github.com/acme/lib');
    my $n = 0;
    my $grant = sub {
        my (%o) = @_;
        return create(run => sprintf('run_%024x', 0xa11ce0 + ++$n),
                      session => $ses, new => 0, max_queued => 99, %o);
    };
    my ($r, $b, $a) = create(run => id('run_', 'g'), session => $ses,
                             max_queued => 99, repository => $A,
                             grants => 'acme/app');
    is($r, 1, "a new session on $A, granted acme/app (the case is GitHub's)");

    for my $c ([ '', 'no grants' ], [ 'acme/lib', 'another repository' ],
               [ 'acme/ap', 'a prefix of its name' ],
               [ 'acme/app-x', 'a longer name' ],
               [ 'acm/*', 'a prefix of its owner' ],
               [ 'acme-x/*', 'another owner' ], [ 'app', 'a bare name' ],
               [ undef, 'no grants argument' ]) {
        my ($g, $what) = @$c;
        ($r, $b, $a) = $grant->(grants => $g);
        is($r, $A, "a follow-up naming no repository, $what: the URL refused");
        unchanged($b, $a, "follow-up, $what");
        ($r, $b, $a) = $grant->(repository => $B, create_pr => 1,
                                defined $g ? (grants => "$g,acme/lib")
                                           : (grants => 'acme/lib'));
        is($r, $A, "... naming a granted one, $what: the session's refused");
        unchanged($b, $a, "follow-up naming acme/lib, $what");
    }

    for my $g ('acme/app', 'ACME/APP', 'acme/*', '*', 'x/y,acme/app,z/*') {
        ($r) = $grant->(grants => lc $g, create_pr => 1);
        is($r, 1, "a follow-up, granted '$g': created");
    }

    ($r, $b, $a) = $grant->(repository => $B, grants => 'acme/app');
    is($r, $B, 'naming an ungranted second repository: its URL');
    unchanged($b, $a, 'second repository not granted');
    ($r) = $grant->(repository => $B, grants => 'acme/app,acme/lib');
    is($r, 1, 'both granted: created');
    ($r, $b, $a) = $grant->(grants => 'acme/lib');
    is($r, $A, 'the session holds both now: a token granting only the second '
              . 'is refused the first');
    ($r, $b, $a) = $grant->(repository => $B, grants => 'acme/lib');
    is($r, $A, '... even naming the second');
    unchanged($b, $a, 'one of two granted');

    my $bare = id('ses_', 'h');
    ($r) = create(run => id('run_', 'h'), session => $bare, max_queued => 99,
                  grants => '');
    is($r, 1, 'a session without repositories: no grant needed');
    ($r) = create(run => id('run_', 'i'), session => $bare, new => 0,
                  max_queued => 99, grants => '');
    is($r, 1, '... nor for its follow-ups');
};

$t->redis('FLUSHALL');

###############################################################################
# run_cancel

sub cancel_keys {
    my ($run, $tenant, $ses) = @_;
    return [ "${P}run:$run", "${P}run:$run:events", "${P}run:$run:diff",
             "${P}tenant:$tenant:started",
             length $ses ? "${P}session:$ses:active" : '',
             "${P}run:$run", "${P}cancel", "${P}tenant:$tenant" ];
}

sub cancel {
    my ($run, %o) = @_;
    my $ten = $o{tenant} // 'alice';
    my $ses = exists $o{session} ? $o{session} : id('ses_', '1');
    return script('run_cancel', cancel_keys($run, $ten, $ses),
                  [ $ten, $o{now} // $now, $run, 100000, $o{retention} // 86400,
                    $ses, 'started', 'running', 'cancelled' ]);
}

sub make_run {
    my ($run, %f) = @_;
    $t->redis('HSET', "${P}run:$run", tenant => 'alice', session => id('ses_', '1'),
              status => 'started', %f);
    $t->redis('XADD', "${P}run:$run:events", '*', type => 'lifecycle', data => '{}');
    $t->redis('SET', "${P}run:$run:diff", 'd');
}

subtest 'run_cancel: a started run' => sub {
    my $run = id('run_', '1');
    make_run($run, retention => 100);
    $t->redis('SADD', "${P}tenant:alice:started", $run, id('run_', '2'));
    $t->redis('ZADD', "${P}session:" . id('ses_', '1') . ':active', 1, $run, 2,
              id('run_', '2'));
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}run:$run");
    my $tsub = $t->redis_connect;
    $tsub->subscribe("${P}tenant:alice");
    my ($r, $b, $a) = cancel($run);
    my %h = @{ $r || [] };
    is_deeply(\%h, { tenant => 'alice', session => id('ses_', '1'),
                     status => 'cancelled', retention => 100,
                     finished_at => $now, error => 'cancelled before it started' },
              'returns the run hash, cancelled');
    is_deeply($a->{"${P}run:$run:events"}{value}[1],
              { type => 'lifecycle', data => '{"status":"cancelled"}', ts => $now },
              'a lifecycle event');
    is_deeply($a->{"${P}tenant:alice:started"}{value}, [ id('run_', '2') ],
              'out of the started set');
    is_deeply($a->{"${P}session:" . id('ses_', '1') . ':active'}{value},
              [ id('run_', '2'), 2 ], "out of its session's active set");
    for my $k ("run:$run", "run:$run:events", "run:$run:diff") {
        my $ttl = $t->redis('TTL', "${P}$k");
        ok($ttl > 90 && $ttl <= 100, "$k expires after the run's retention ($ttl)");
    }
    is_deeply($sub->next_message(2), [ "${P}run:$run", 'cancelled' ], 'the ping');
    is_deeply($tsub->next_message(2), [ "${P}tenant:alice", "$run cancelled" ],
              "the tenant's channel: run id and status");

    my $run2 = id('run_', '3');
    make_run($run2);
    ($r, $b, $a) = cancel($run2, retention => 50);
    my $ttl = $t->redis('TTL', "${P}run:$run2");
    ok($ttl > 40 && $ttl <= 50, "no retention in the run: ARGV's ($ttl)");
};

subtest 'run_cancel: a running run' => sub {
    my $run = id('run_', '4');
    make_run($run, status => 'running');
    $t->redis('SADD', "${P}tenant:alice:started", id('run_', '9'));
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}cancel");
    my ($r, $b, $a) = cancel($run);
    my %h = @{ $r || [] };
    is($h{status}, 'running', 'still running');
    is($h{cancel_requested}, 1, 'cancel_requested');
    is_deeply($a->{"${P}run:$run:events"}{value}[1],
              { type => 'lifecycle', data => '{"cancelRequested":true}', ts => $now },
              'one event');
    is_deeply($a->{"${P}tenant:alice:started"}, $b->{"${P}tenant:alice:started"},
              'the started set untouched');
    is_deeply($sub->next_message(2), [ "${P}cancel", $run ], 'the runners are told');
    ($r, $b, $a) = cancel($run);
    is(scalar @{ $a->{"${P}run:$run:events"}{value} }, 2, 'again: no second event');
};

subtest 'run_cancel: refusals and ended runs write nothing' => sub {
    my $run = id('run_', '5');
    make_run($run, status => 'completed');
    my ($r, $b, $a) = cancel($run);
    is({ @{ $r || [] } }->{status}, 'completed', 'an ended run: returned as it is');
    unchanged($b, $a, 'ended');

    make_run(id('run_', '6'));
    ($r, $b, $a) = cancel(id('run_', '6'), tenant => 'bob');
    is($r, undef, "another tenant's: nil");
    unchanged($b, $a, "another tenant's");

    ($r, $b, $a) = cancel(id('run_', '6'), session => id('ses_', '7'));
    is($r, undef, 'not of the session its key is of: nil');
    unchanged($b, $a, 'another session');

    ($r, $b, $a) = cancel(id('run_', '0'));
    is($r, undef, 'unknown: nil');
    unchanged($b, $a, 'unknown');

    my $run7 = id('run_', '7');
    $t->redis('HSET', "${P}run:$run7", tenant => 'alice', status => 'started');
    $t->redis('SADD', "${P}tenant:alice:started", $run7);
    ($r, $b, $a) = cancel($run7, session => '');
    is({ @{ $r || [] } }->{status}, 'cancelled', "a run of no session ('' key): cancelled");
    ok(!$t->redis('SISMEMBER', "${P}tenant:alice:started", $run7), '... out of the started set');
};

$t->redis('FLUSHALL');

###############################################################################
# run_message and run_inbox: a message for a run's agent
# (opencode_send_message, the run page's message box) queued in its inbox;
# the sandbox takes the oldest through the egress route `inbox`

sub message_keys {
    my ($run) = @_;
    return [ "${P}run:$run", "${P}run:$run:inbox", "${P}run:$run:events",
             "${P}run:$run", "${P}egress:routes", "${P}tenant:alice:usage" ];
}

# run_message with the module's ARGV; %o overrides by name
sub message {
    my ($run, %o) = @_;
    my %a = (tenant => 'alice', now => $now, text => 'hello', who => 'alice',
             maxlen => 100000, waiting => 10, per_run => 100,
             started => 'started', running => 'running', via => 'mcp',
             ttl => 172800, grants => '*', %o);
    return script('run_message', message_keys($run),
                  [ @a{qw(tenant now text who maxlen waiting per_run started
                          running via ttl grants)} ]);
}

# run_inbox with the egress's KEYS and ARGV
sub take {
    my ($run, %o) = @_;
    return script('run_inbox', [ "${P}run:$run", "${P}run:$run:inbox",
                                 "${P}run:$run:events", "${P}run:$run" ],
                  [ $o{tenant} // 'alice', $o{now} // $now, 100000 ]);
}

# a run of alice's: its hash (running unless %f says) and its first event
sub message_run {
    my ($run, %f) = @_;
    $t->redis('HSET', "${P}run:$run", tenant => 'alice', status => 'running', %f);
    $t->redis('XADD', "${P}run:$run:events", '*', type => 'lifecycle',
              data => '{"status":"running"}');
}

# the inbox of a state, its entries decoded
sub inbox_of {
    my ($state, $run) = @_;
    return [ map { json_decode($_) } @{ $state->{"${P}run:$run:inbox"}{value} || [] } ];
}

# the events of a state after the run's first, their data decoded
sub events_after_first {
    my ($state, $run) = @_;
    my @ev = @{ $state->{"${P}run:$run:events"}{value} || [] };
    shift @ev;
    return [ map { { %$_, data => json_decode($_->{data}) } } @ev ];
}

subtest 'run_message: a running run' => sub {
    my $run = id('run_', '1');
    my $IN = "${P}run:$run:inbox";
    message_run($run);
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}run:$run");
    my ($r, $b, $a) = message($run, text => 'look at the tests first');
    is_deeply($r, [ 'ok', 1, 1 ], "queued: {'ok', message id 1, 1 waiting}");
    is_deeply(inbox_of($a, $run), [ { id => 1, text => 'look at the tests first' } ],
              'the inbox: one JSON {id, text}');
    my $bytes = 256 + 2 * length('look at the tests first');
    is_deeply($a->{"${P}run:$run"}{value},
              { tenant => 'alice', status => 'running', messages => 1, bytes => $bytes },
              'the run hash counts it: messages 1, bytes 256 + twice the text');
    is_deeply($a->{"${P}tenant:alice:usage"}{value}, { bytes => $bytes },
              '... and so does the tenant\'s usage');
    is_deeply(events_after_first($a, $run),
              [ { type => 'message', ts => $now,
                  data => { id => 1, from => 'alice', via => 'mcp',
                            text => 'look at the tests first' } } ],
              "one event 'message' {id, from, via, text}");
    is_deeply([ sort keys %$a ], [ sort keys(%$b), $IN, "${P}tenant:alice:usage" ],
              'two keys more: the inbox, the tenant\'s usage');
    my $ttl = $t->redis('TTL', $IN);
    ok($ttl > 172700 && $ttl <= 172800,
       "the inbox expires ARGV[11] s after its last message ($ttl s), the run hash's TTL or not");
    is_deeply($sub->next_message(2), [ "${P}run:$run", 'message' ], "the ping: 'message'");

    ($r, $b, $a) = message($run, text => 'and the docs', via => 'dashboard',
                           now => $now + 7);
    is_deeply($r, [ 'ok', 2, 2 ], "a second, from the dashboard: {'ok', 2, 2 waiting}");
    is_deeply(inbox_of($a, $run), [ { id => 1, text => 'look at the tests first' },
                                    { id => 2, text => 'and the docs' } ],
              '... queued after the first');
    is($a->{"${P}run:$run"}{value}{messages}, 2, '... messages 2');
    is_deeply(events_after_first($a, $run)->[1],
              { type => 'message', ts => $now + 7,
                data => { id => 2, from => 'alice', via => 'dashboard',
                          text => 'and the docs' } },
              "... its event says via 'dashboard'");
    is_deeply($sub->next_message(2), [ "${P}run:$run", 'message' ], '... a ping');
    $sub->close;
};

subtest 'run_message: a cancel asked, and the grants of the token that sends it' => sub {
    my $run = id('run_', '9');
    message_run($run, cancel_requested => 1);
    my ($r, $b, $a) = message($run);
    is_deeply($r, [ 'ended', 'cancel requested' ], "cancel requested: {'ended', 'cancel requested'}");
    unchanged($b, $a, '... nothing written');

    my $g = id('run_', 'a');
    message_run($g, repository => 'https://github.com/Acme/App',
                repositories => '["https://github.com/Acme/App","https://github.com/tools/lib"]');
    for my $case ([ 'acme/app', 'https://github.com/tools/lib' ],
                  [ 'tools/*', 'https://github.com/Acme/App' ],
                  [ '', 'https://github.com/Acme/App' ]) {
        my ($grants, $url) = @$case;
        ($r, $b, $a) = message($g, grants => $grants);
        is_deeply($r, [ 'grant', $url ], "grants '$grants': {'grant', $url}");
        unchanged($b, $a, '... nothing written');
    }
    for my $grants ('acme/app,tools/lib', 'acme/*,tools/*', '*') {
        ($r) = message($g, grants => $grants);
        is($r->[0], 'ok', "grants '$grants': ok");
    }
};

subtest 'run_message: each message sets the inbox\'s lifetime again' => sub {
    my $run = id('run_', '2');
    my $IN = "${P}run:$run:inbox";
    message_run($run);
    my ($r) = message($run, ttl => 50);
    is_deeply($r, [ 'ok', 1, 1 ], 'queued');
    my $ttl = $t->redis('TTL', $IN);
    ok($ttl > 40 && $ttl <= 50, "ARGV[11] 50: the inbox expires in $ttl s");
    ($r) = message($run, ttl => 500);
    is_deeply($r, [ 'ok', 2, 2 ], 'a second');
    $ttl = $t->redis('TTL', $IN);
    ok($ttl > 490 && $ttl <= 500, "... its lifetime set again: $ttl s");
    is_deeply([ map { [ uc $_->[0], $_->[1] ] } grep { uc $_->[0] =~ /EXPIRE/ } @LAST_CMDS ],
              [ [ 'EXPIRE', $IN ] ], '... by one EXPIRE of the inbox');
};

subtest 'run_message: a queued (started) run; the status names are ARGV' => sub {
    my $run = id('run_', '3');
    message_run($run, status => 'started');
    my ($r, $b, $a) = message($run);
    is_deeply($r, [ 'ok', 1, 1 ], "a 'started' run: queued for when it runs");
    is_deeply(inbox_of($a, $run), [ { id => 1, text => 'hello' } ], '... in its inbox');

    my $run2 = id('run_', '4');
    message_run($run2, status => 'queued');
    ($r) = message($run2, started => 'queued');
    is_deeply($r, [ 'ok', 1, 1 ], "'queued' named as started: queued");
    ($r, $b, $a) = message($run2, started => 'waiting', running => 'busy');
    is_deeply($r, [ 'ended', 'queued' ], "... named neither: {'ended', 'queued'}");
    unchanged($b, $a, 'a status not named');
};

subtest 'run_message: refusals write nothing' => sub {
    my $run = id('run_', '5');
    my $IN = "${P}run:$run:inbox";
    my $R = "${P}egress:routes";
    message_run($run);
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}run:$run");

    my ($r, $b, $a) = message($run, tenant => 'bob');
    is($r, undef, "another tenant's: nil");
    unchanged($b, $a, "another tenant's");
    ($r, $b, $a) = message(id('run_', '0'));
    is($r, undef, 'unknown: nil');
    unchanged($b, $a, 'unknown');

    for my $s (qw(completed failed cancelled)) {
        $t->redis('HSET', "${P}run:$run", status => $s);
        ($r, $b, $a) = message($run);
        is_deeply($r, [ 'ended', $s ], "a run $s: {'ended', '$s'}");
        unchanged($b, $a, "a run $s");
    }
    $t->redis('HSET', "${P}run:$run", status => 'running');

    for my $c ([ 'anthropic github', 'without inbox' ],
               [ 'inboxes anthropic', "with 'inboxes' (a part of a name is not it)" ],
               [ '', 'announcing none' ]) {
        $t->redis('SET', $R, $c->[0]);
        ($r, $b, $a) = message($run);
        is_deeply($r, [ 'noroute' ], "an egress $c->[1]: {'noroute'}");
        unchanged($b, $a, "an egress $c->[1]");
    }
    is($sub->next_message(0.3), undef, 'no ping for a refusal');

    # waiting: 2 already there (of 2 at most); sent: 2 (of 3 at most)
    $t->redis('RPUSH', $IN, '{"id":1,"text":"a"}', '{"id":2,"text":"b"}');
    $t->redis('HSET', "${P}run:$run", messages => 2);
    for my $routes ('inbox anthropic', 'anthropic inbox', undef) {
        if (defined $routes) { $t->redis('SET', $R, $routes) } else { $t->redis('DEL', $R) }
        ($r, $b, $a) = message($run, waiting => 2, per_run => 3);
        is_deeply($r, [ 'full', 2 ],
                  'an egress ' . (defined $routes ? "announcing '$routes'" : 'announcing nothing')
                  . ": past the route check; 2 waiting of 2: {'full', 2}");
        unchanged($b, $a, 'full');
    }

    ($r, $b, $a) = message($run, waiting => 3, per_run => 3, text => 'c');
    is_deeply($r, [ 'ok', 3, 3 ], "3 may wait: {'ok', 3, 3 waiting}");
    is_deeply(inbox_of($a, $run), [ { id => 1, text => 'a' }, { id => 2, text => 'b' },
                                    { id => 3, text => 'c' } ], '... last in the inbox');
    is_deeply($sub->next_message(2), [ "${P}run:$run", 'message' ], '... a ping');

    ($r, $b, $a) = message($run, waiting => 9, per_run => 3);
    is_deeply($r, [ 'limit', 3 ], "3 sent, 3 at most: {'limit', 3}");
    unchanged($b, $a, 'limit');
    ($r, $b, $a) = message($run, waiting => 3, per_run => 3);
    is_deeply($r, [ 'full', 3 ], "both full and at its limit: {'full', 3} first");
    unchanged($b, $a, 'full and limit');
    is($sub->next_message(0.3), undef, 'no ping for a refusal');
    $sub->close;
};

subtest 'run_message, run_inbox: a text round-trips byte for byte' => sub {
    my $run = id('run_', '6');
    message_run($run);
    # quotes, backslashes, newlines, a control byte, '/', non-ASCII UTF-8
    my $text = qq(say "hi" \\"quoted\\" C:\\dir\\ \\n is not a newline\n)
             . "line 2\r\n\ttab / \x01 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
             . "\xf0\x9f\x9a\x80 \"\\";
    my $chars = $text;
    utf8::decode($chars) or die 'not UTF-8';
    my ($r, $b, $a) = message($run, text => $text);
    is_deeply($r, [ 'ok', 1, 1 ], 'queued');
    is_deeply(inbox_of($a, $run), [ { id => 1, text => $chars } ],
              'the inbox JSON decodes to the very text');
    is_deeply(events_after_first($a, $run)->[0]{data},
              { id => 1, from => 'alice', via => 'mcp', text => $chars },
              '... and so does the event JSON');
    ($r, $b, $a) = take($run);
    is_deeply($r, [ 1, $text ], 'run_inbox hands back the same bytes');
};

subtest 'run_inbox: nothing waiting, another tenant\'s' => sub {
    my $run = id('run_', '7');
    my $IN = "${P}run:$run:inbox";
    message_run($run);
    my ($r, $b, $a) = take($run);
    is($r, undef, 'nothing waiting: nil');
    unchanged($b, $a, 'nothing waiting');

    $t->redis('RPUSH', $IN, '{"id":1,"text":"a"}');
    ($r, $b, $a) = take($run, tenant => 'bob');
    is($r, undef, "another tenant's: nil");
    unchanged($b, $a, "another tenant's (the inbox untouched)");

    $t->redis('DEL', "${P}run:$run");
    ($r, $b, $a) = take($run);
    is($r, undef, 'the run hash gone: nil');
    unchanged($b, $a, 'the run hash gone');
};

subtest 'run_inbox: the oldest first, delivered' => sub {
    my $run = id('run_', '8');
    my $IN = "${P}run:$run:inbox";
    message_run($run, messages => 2);
    $t->redis('RPUSH', $IN, '{"id":1,"text":"first"}', '{"text":"second","id":2}');
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}run:$run");

    my ($r, $b, $a) = take($run, now => $now + 3);
    is_deeply($r, [ 1, 'first' ], 'the oldest: {1, first}');
    is_deeply($a->{$IN}{value}, [ '{"text":"second","id":2}' ], '... out of the inbox');
    is_deeply(events_after_first($a, $run),
              [ { type => 'message', ts => $now + 3,
                  data => { id => 1, delivered => JSON::PP::true() } } ],
              "... an event 'message' {id: 1, delivered: true}");
    is_deeply($a->{"${P}run:$run"}{value}, $b->{"${P}run:$run"}{value},
              '... the run hash untouched');
    is_deeply($sub->next_message(2), [ "${P}run:$run", 'message' ], "... the ping: 'message'");

    ($r, $b, $a) = take($run, now => $now + 4);
    is_deeply($r, [ 2, 'second' ], 'then the next: {2, second}');
    ok(!exists $a->{$IN}, '... the inbox empty: gone');
    is_deeply(events_after_first($a, $run)->[1],
              { type => 'message', ts => $now + 4,
                data => { id => 2, delivered => JSON::PP::true() } },
              '... its event');
    is_deeply($sub->next_message(2), [ "${P}run:$run", 'message' ], '... a ping');

    ($r, $b, $a) = take($run);
    is($r, undef, 'then: nil');
    unchanged($b, $a, 'then');
    $sub->close;
};

subtest 'run_inbox: a malformed entry is dropped, nil (no event, no ping)' => sub {
    my $run = id('run_', '9');
    my $IN = "${P}run:$run:inbox";
    message_run($run);
    my @bad = ('not json', '{"text":"no id"}', '{"id":"3","text":"a string id"}',
               '{"id":4}', '[4,"an array"]');
    $t->redis('RPUSH', $IN, @bad, '{"id":5,"text":"good"}');
    my $sub = $t->redis_connect;
    $sub->subscribe("${P}run:$run");
    while (my $e = shift @bad) {
        my ($r, $b, $a) = take($run);
        is($r, undef, "'$e': nil");
        is_deeply($a->{$IN}{value}, [ @bad, '{"id":5,"text":"good"}' ],
                  '... dropped from the inbox');
        delete $_->{$IN} for $a, $b;
        unchanged($b, $a, "... and nothing else: '$e'");
    }
    is($sub->next_message(0.3), undef, 'no ping for them');
    my ($r) = take($run);
    is_deeply($r, [ 5, 'good' ], 'the next well-formed one: taken');
    $sub->close;
};

$t->redis('FLUSHALL');

###############################################################################
# the tenant's budgets (docs/contracts.md, "Tenant budgets")

my $USAGE = "${P}tenant:alice:usage";

# run_create with the tenant's usage and budgets (bytes, sessions, disk)
sub create_b {
    my (%o) = @_;
    my $run = $o{run} // id('run_', '1');
    my $ses = $o{session} // id('ses_', '1');
    return script('run_create', create_keys($run, 'alice', $ses, usage => $USAGE),
                  create_argv(max_queued => 99, %o, run => $run, session => $ses));
}

subtest 'run_create: the tenant\'s usage and its budgets' => sub {
    my ($r, $b, $a) = create_b(task => 'x' x 100, title => 't', max_bytes => 10000,
                               max_sessions => 2, max_disk => 5000);
    is($r, 1, 'created');
    is_deeply($a->{$USAGE}{value}, { sessions => 1, 's:' . id('ses_', '1') => 0 },
              "the tenant's usage: one session (0 bytes measured); the run's bytes "
              . 'are counted when it ends');
    my @w = grep { $_->[1] eq $USAGE } @LAST_CMDS;
    is_deeply([ map { uc $_->[0] } @w ], [qw(HMGET HSET HINCRBY)],
              '... one read of it, two writes for the new session');

    ($r, $b, $a) = create_b(run => id('run_', '2'), new => 0, max_bytes => 10000,
                            max_sessions => 2, max_disk => 5000);
    is($r, 1, 'a follow-up in the session: created');
    is($a->{$USAGE}{value}{sessions}, 1, '... no new session counted');
    is_deeply([ map { uc $_->[0] } grep { $_->[1] eq $USAGE } @LAST_CMDS ], ['HMGET'],
              '... the usage read once, nothing written');

    ($r, $b, $a) = create_b(run => id('run_', '3'), session => id('ses_', '2'),
                            max_sessions => 2);
    is($r, 1, 'a second session: created');
    is($a->{$USAGE}{value}{sessions}, 2, '... two sessions');

    ($r, $b, $a) = create_b(run => id('run_', '4'), session => id('ses_', '3'),
                            max_sessions => 2);
    is($r, -6, 'a third session past the sessions budget (2): -6');
    unchanged($b, $a, 'sessions budget');
    ($r, $b, $a) = create_b(run => id('run_', '4'), new => 0, max_sessions => 2);
    is($r, 1, '... a run in a session it has still may');

    $t->redis('HSET', $USAGE, bytes => 10000);
    ($r, $b, $a) = create_b(run => id('run_', '5'), new => 0, max_bytes => 10000);
    is($r, -5, 'the runs hold the bytes budget: -5');
    unchanged($b, $a, 'bytes budget');
    ($r, $b, $a) = create_b(run => id('run_', '5'), new => 0, max_bytes => 0);
    is($r, 1, '... a budget of 0 is none');

    $t->redis('HSET', $USAGE, disk => 5000);
    ($r, $b, $a) = create_b(run => id('run_', '6'), new => 0, max_disk => 5000);
    is($r, -7, 'the workspaces hold the disk budget: -7');
    unchanged($b, $a, 'disk budget');

    ($r, $b, $a) = create_b(run => id('run_', '6'), session => id('ses_', '4'),
                            tenant => 'alice', max_bytes => 10000, max_sessions => 9);
    is($r, -5, 'refusals come in order: bytes first');
};

subtest 'run_cancel: a started run is counted and listed for its bytes\' release' => sub {
    my $run = id('run_', '1');
    my $h = $t->redis_hgetall("${P}run:$run");
    # an attempt of a group: its group's run ids counted too
    my $group = join ' ', map { id('run_', $_) } 1 .. 3;
    my $bytes = 1024 + length($h->{task}) + length($h->{title}) + length($h->{pr_title})
                + 2 * length($h->{repositories}) + length($group);
    my $before = $t->redis('HGET', $USAGE, 'bytes') // 0;
    $t->redis('HSET', "${P}run:$run", retention => 100, group_runs => $group);
    my ($r, $b, $a) = script('run_cancel',
        [ @{ cancel_keys($run, 'alice', id('ses_', '1')) }, $USAGE, "${P}budget:expiry" ],
        [ 'alice', $now, $run, 100000, 86400, id('ses_', '1'), 'started', 'running',
          'cancelled' ]);
    is({ @{ $r || [] } }->{status}, 'cancelled', 'cancelled');
    is($a->{$USAGE}{value}{bytes}, $before + $bytes,
       "the tenant's usage gains what the run holds (its hash, task, title, group)");
    is($a->{"${P}run:$run"}{value}{bytes}, $bytes, '... and so does the run\'s own bytes');
    is_deeply($a->{"${P}budget:expiry"}{value}, [ "$run $bytes alice", $now + 100000 ],
              'budget:expiry: "<run> <bytes> <tenant>" when its keys expire');
};

$t->redis('FLUSHALL');

###############################################################################
# run_diff and run_events

my $DIFF = "diff --git a/x b/x\n--- a/x\n+++ b/x\n\@\@ -1 +1 \@\@\n-a\n+b\n"
         . "diff --git a/y b/y\n--- a/y\n+++ b/y\n\@\@ -1 +1 \@\@\n-c\n+d\n";

sub diff {
    my ($run, @argv) = @_;
    return script('run_diff', [ "${P}run:$run", "${P}run:$run:diff" ], \@argv);
}

subtest 'run_diff' => sub {
    my $run = id('run_', '1');
    my $ylen = length($DIFF) - index($DIFF, 'diff --git a/y');
    $t->redis('HSET', "${P}run:$run", tenant => 'alice',
              diff_index => '{"y":[' . index($DIFF, 'diff --git a/y') . ",$ylen]}");
    $t->redis('SET', "${P}run:$run:diff", $DIFF);
    my ($r, $b, $a) = diff($run, 'alice', 0, 10, '', 1000);
    is_deeply($r, [ substr($DIFF, 0, 10), length $DIFF, 'range' ], 'a page of the diff');
    unchanged($b, $a, 'read');
    ($r) = diff($run, 'alice', 10, 10, '', 1000);
    is_deeply($r, [ substr($DIFF, 10, 10), length $DIFF, 'range' ], 'the next page');
    ($r) = diff($run, 'alice', 0, 4096, 'y', 1000);
    is_deeply($r, [ substr($DIFF, index($DIFF, 'diff --git a/y')), $ylen, 'index' ],
              "a file's section, through the index");
    ($r) = diff($run, 'alice', 5, 10, 'y', 1000);
    is_deeply($r, [ substr($DIFF, index($DIFF, 'diff --git a/y') + 5, 10), $ylen, 'index' ],
              "a page inside the section");
    ($r) = diff($run, 'alice', 0, 10, 'z', 1000);
    is_deeply($r, [ '', 0, 'index' ], 'a file the index does not list: empty');
    $t->redis('HSET', "${P}run:$run", diff_index => '{"y":[0,100000]}');
    ($r) = diff($run, 'alice', 0, 10, 'y', 1000);
    is_deeply($r, [ $DIFF, length $DIFF, 'whole' ],
              'an entry outside the diff: the whole (small) diff, to search');
    ($r) = diff($run, 'alice', 0, 10, 'y', 10);
    is_deeply($r, [ '', length $DIFF, 'noindex' ], '... too big to search: noindex');
    $t->redis('HDEL', "${P}run:$run", 'diff_index');
    ($r) = diff($run, 'alice', 0, 10, 'y', 1000);
    is($r->[2], 'whole', 'no index: the whole small diff');
    ($r, $b, $a) = diff($run, 'bob', 0, 10, '', 1000);
    is($r, undef, "another tenant's: nil");
};

subtest 'run_events' => sub {
    my $run = id('run_', '2');
    $t->redis('HSET', "${P}run:$run", tenant => 'alice');
    my @ids = map { $t->redis('XADD', "${P}run:$run:events", '*', type => 'agent',
                              data => "{\"n\":$_}") } 1 .. 5;
    my ($r, $b, $a) = script('run_events', [ "${P}run:$run", "${P}run:$run:events" ],
                             [ 'alice', '-', 2 ]);
    is_deeply([ map { $_->[0] } @$r ], [ @ids[0, 1] ], 'the first page');
    unchanged($b, $a, 'read');
    ($r) = script('run_events', [ "${P}run:$run", "${P}run:$run:events" ],
                  [ 'alice', "($ids[1]", 10 ]);
    is_deeply([ map { $_->[0] } @$r ], [ @ids[2 .. 4] ], 'after an id');
    is_deeply({ @{ $r->[0][1] } }, { type => 'agent', data => '{"n":3}' }, 'fields');
    ($r) = script('run_events', [ "${P}run:$run", "${P}run:$run:events" ],
                  [ 'bob', '-', 10 ]);
    is($r, undef, "another tenant's: nil");
};

subtest 'ui_events' => sub {
    my $run = id('run_', '3');
    my $K = [ "${P}run:$run", "${P}run:$run:events" ];
    $t->redis('HSET', "${P}run:$run", tenant => 'alice', status => 'running');
    my @ids = map { $t->redis('XADD', "${P}run:$run:events", '*', type => 'agent',
                              data => "{\"n\":$_}") } 1 .. 3;
    my ($r, $b, $a) = script('ui_events', $K, [ 'alice', '-', 2 ]);
    is($r->[0], 'running', 'the status');
    is_deeply([ map { $_->[0] } @{ $r->[1] } ], [ @ids[0, 1] ], 'the first page');
    unchanged($b, $a, 'read');
    ($r) = script('ui_events', $K, [ 'alice', "($ids[1]", 10 ]);
    is_deeply([ map { $_->[0] } @{ $r->[1] } ], [ $ids[2] ], 'after an id');
    ($r) = script('ui_events', $K, [ 'alice', "($ids[2]", 10 ]);
    is_deeply($r, [ 'running', [] ], 'nothing new: the status, no events');
    $t->redis('HSET', "${P}run:$run", status => 'completed');
    ($r) = script('ui_events', $K, [ 'alice', "($ids[2]", 10 ]);
    is($r->[0], 'completed', 'ended: said');
    ($r) = script('ui_events', $K, [ 'bob', '-', 10 ]);
    is($r, undef, "another tenant's: nil");
    ($r) = script('ui_events', [ "${P}run:" . id('run_', '9'), "${P}run:x:events" ],
                  [ 'alice', '-', 10 ]);
    is($r, undef, 'unknown run: nil');
};

subtest 'run_create: the routes the egress announced' => sub {
    # what the egress serves (sandbox_mcp_egress_announce): a run needs its
    # model's route, and GitHub's with a repository; refused with the
    # route it needs and the ones there are, nothing written
    $t->redis('FLUSHALL');
    my $R = "${P}egress:routes";
    my $n = 0;
    my $try = sub {
        my (%o) = @_;
        $n++;
        return create(run => sprintf('run_%024x', 0xe0 + $n),
                      session => sprintf('ses_%024x', 0xe0 + $n),
                      max_queued => 99, %o);
    };
    my ($r, $b, $a) = $try->(route => 'openai', repository => 'https://github.com/acme/app');
    is($r, 1, 'nothing announced: nothing checked, created');

    $t->redis('SET', $R, 'anthropic');
    ($r, $b, $a) = $try->(route => 'openai');
    is_deeply($r, [ 'route', 'openai', 'anthropic' ],
              'announced "anthropic", a run of an openai model: {route, openai, routes}');
    unchanged($b, $a, 'no route for the model');
    ($r, $b, $a) = $try->(route => 'anthropic', repository => 'https://github.com/acme/app');
    is_deeply($r, [ 'route', 'github', 'anthropic' ],
              '... a run on a repository: {route, github, routes}');
    unchanged($b, $a, 'no route for the repository');
    ($r) = $try->(route => 'anthropic');
    is($r, 1, '... an anthropic run without a repository: created');
    ($r) = $try->(route => '');
    is($r, 1, '... no route asked (a caller before the argument): created');
    ($r) = $try->(route => undef);
    is($r, 1, '... the argument left out: created');
    ($r, $b, $a) = $try->(route => 'anthro');
    is_deeply($r, [ 'route', 'anthro', 'anthropic' ], '... a part of a name is not it');

    $t->redis('SET', $R, 'registry-npm anthropic github github-api');
    ($r) = $try->(route => 'anthropic', repository => 'https://github.com/acme/app',
                  session => id('ses_', 'e'), run => id('run_', 'e'));
    is($r, 1, 'announced with github: a run on a repository created');
    $t->redis('SET', $R, 'anthropic github-api');
    ($r, $b, $a) = create(run => id('run_', 'f'), session => id('ses_', 'e'), new => 0,
                          route => 'anthropic', max_queued => 99);
    is_deeply($r, [ 'route', 'github', 'anthropic github-api' ],
              'a follow-up naming no repository, of a session with one, without github: refused');
    unchanged($b, $a, 'follow-up without github');

    $t->redis('SET', $R, '');
    ($r, $b, $a) = $try->(route => 'anthropic');
    is_deeply($r, [ 'route', 'anthropic', '' ], 'announced none: every model refused');
    unchanged($b, $a, 'no route at all');
    $t->redis('FLUSHALL');
};

subtest 'run_create: the run\'s image' => sub {
    $t->redis('FLUSHALL');
    my $run = id('run_', 'i');
    my $ses = id('ses_', 'i');
    my ($r) = create(run => $run, session => $ses, image => 'smcp-sandbox-go:1');
    is($r, 1, 'created: 1');
    is($t->redis('HGET', "${P}run:$run", 'image'), 'smcp-sandbox-go:1',
       'the run hash holds the image it names');
    # a caller of the script before the argument existed: no image (nor
    # the grants after it: a run without a repository needs none)
    my $run2 = id('run_', 'j');
    my $ses2 = id('ses_', 'j');
    my $argv = create_argv(run => $run2, session => $ses2, image => undef);
    ($r) = script('run_create', create_keys($run2, 'alice', $ses2), $argv);
    is($r, 1, 'without the argument: created');
    is($t->redis('HGET', "${P}run:$run2", 'image'), '', '... with no image (the runner\'s)');
};

subtest 'subscribe' => sub {
    my $K = [ "${P}mcp:" . ('c' x 64) . ':subs' ];
    my ($r, $b, $a) = script('subscribe', $K, [ 'opencode://runs/a', 2, 600 ]);
    is($r, 1, 'added: 1');
    ok($t->redis('TTL', $K->[0]) > 590, 'kept with the TTL');
    ($r) = script('subscribe', $K, [ 'opencode://runs/a', 2, 600 ]);
    is($r, 0, 'held already: 0');
    ($r) = script('subscribe', $K, [ 'opencode://runs/b', 2, 600 ]);
    is($r, 1, 'a second');
    ($r, $b, $a) = script('subscribe', $K, [ 'opencode://runs/c', 2, 600 ]);
    is($r, -1, 'past the most: -1');
    unchanged($b, $a, 'refused');
    is_deeply([ sort @{ $t->redis('SMEMBERS', $K->[0]) } ],
              [ 'opencode://runs/a', 'opencode://runs/b' ], 'the set');
};

###############################################################################
# OAuth (issue 11)

$t->redis('FLUSHALL');

my $CL = "${P}oauth:client:mcp_" . ('1' x 32);
my $CODE = "${P}oauth:code:" . ('c' x 64);
my $FAM = "${P}oauth:family:" . ('f' x 24);
my $CH = "${P}revoked";
my $REVX = "${P}revoked:exp";
my $sec = int(time());

my $UNUSED = "${P}oauth:unused";
my $SIGNINS = "${P}oauth:signins";

subtest 'oauth_client' => sub {
    my ($r, $b, $a) = script('oauth_client', [ $CL, $UNUSED ],
                             [ 'Claude', '["https://claude.ai/cb"]', $sec, 3600, 2 ]);
    is($r, 1, 'registered: 1');
    is_deeply($a->{$CL}{value}, { name => 'Claude', redirect_uris => '["https://claude.ai/cb"]',
                                  created_at => $sec }, '... its hash');
    ok($a->{$CL}{expires} && $t->redis('TTL', $CL) <= 3600, '... expiring after its ttl');
    is_deeply($a->{$UNUSED}{value}, [ $CL, $sec + 3600 ], '... an unused client until then');
    ($r, $b, $a) = script('oauth_client', [ $CL, $UNUSED ], [ 'x', '[]', $sec, 3600, 2 ]);
    is($r, 0, 'the id taken: 0');
    unchanged($b, $a, 'the id taken');

    my $cl2 = "${P}oauth:client:mcp_" . ('2' x 32);
    my $cl3 = "${P}oauth:client:mcp_" . ('3' x 32);
    ($r) = script('oauth_client', [ $cl2, $UNUSED ], [ 'x', '[]', $sec, 600, 2 ]);
    is($r, 1, 'a second: 1');
    ($r, $b, $a) = script('oauth_client', [ $cl3, $UNUSED ], [ 'x', '[]', $sec, 600, 2 ]);
    is($r, -600, 'a third, 2 at most: -600 (full; the soonest frees in 600 s)');
    unchanged($b, $a, 'full');
    ($r, $b, $a) = script('oauth_client', [ $cl3, $UNUSED ], [ 'x', '[]', $sec + 601, 600, 2 ]);
    is($r, 1, 'once one has expired: 1');
    is_deeply($a->{$UNUSED}{value}, [ $cl3, $sec + 1201, $CL, $sec + 3600 ],
              '... the expired one left the set');
    $t->redis('DEL', $cl2, $cl3);
    $t->redis('ZREM', $UNUSED, $cl3);
};

my @code_argv = ('mcp_' . ('1' x 32), 'https://claude.ai/cb', 'CHAL', 'http://h/mcp',
                 'alice', '["acme/*"]', 'key-1', $sec + 3600, $sec + 60, 60, 86400, '', '');

subtest 'oauth_code' => sub {
    my @k = ($CL, $CODE, $REV, $UNUSED);
    my @a = @code_argv;
    $a[1] = 'https://evil.example/cb';
    my ($r, $b, $a) = script('oauth_code', \@k, \@a);
    is($r, 'NOCLIENT', 'a redirect_uri not registered: NOCLIENT');
    unchanged($b, $a, 'NOCLIENT');
    ($r, $b, $a) = script('oauth_code', [ "${P}oauth:client:none", $CODE, $REV, $UNUSED ],
                          \@code_argv);
    is($r, 'NOCLIENT', 'an unknown client: NOCLIENT');
    $t->redis('HSET', $REV, 'key-1', $sec + 3600);
    ($r, $b, $a) = script('oauth_code', \@k, \@code_argv);
    is($r, 'REVOKED', 'a revoked access key: REVOKED');
    unchanged($b, $a, 'REVOKED');
    $t->redis('HDEL', $REV, 'key-1');
    ($r, $b, $a) = script('oauth_code', \@k, \@code_argv);
    is($r, 'OK', 'stored: OK');
    is_deeply($a->{$CODE}{value}, { client_id => $code_argv[0], redirect_uri => $code_argv[1],
        challenge => 'CHAL', resource => 'http://h/mcp', sub => 'alice',
        repos => '["acme/*"]', key_jti => 'key-1', key_exp => $sec + 3600,
        exp => $sec + 60, github => '', label => '' }, '... its hash');
    ok($a->{$CODE}{expires}, '... expiring');
    ok(!exists $a->{$UNUSED}, '... the client used: out of the unused ones');
    ok($t->redis('TTL', $CL) > 3600, '... living the client ttl from now');
    $t->redis('EXPIRE', $CL, 3600);
    $a[1] = $code_argv[1];
    $a[10] = 0;
    ($r, $b, $a) = script('oauth_code', \@k, \@a);
    is($r, 'OK', 'client ttl 0 (a metadata document): OK');
    ok($t->redis('TTL', $CL) <= 3600, '... its expiry kept');
};

subtest 'oauth_pending' => sub {
    my $p1 = "${P}oauth:pending:" . ('a' x 32);
    my $p2 = "${P}oauth:pending:" . ('b' x 32);
    my ($r, $b, $a) = script('oauth_pending', [ $p1, $SIGNINS ], [ '{"x":1}', 600, $sec, 1 ]);
    is($r, 1, 'stored: 1');
    is($a->{$p1}{value}, '{"x":1}', '... the request');
    ok($a->{$p1}{expires}, '... expiring');
    is_deeply($a->{$SIGNINS}{value}, [ $p1, $sec + 600 ], '... counted until then');
    ($r, $b, $a) = script('oauth_pending', [ $p2, $SIGNINS ], [ '{"x":2}', 600, $sec + 10, 1 ]);
    is($r, -590, 'one more, 1 at most: -590 (full)');
    unchanged($b, $a, 'full');
    ($r, $b, $a) = script('oauth_pending', [ $p2, $SIGNINS ], [ '{"x":2}', 600, $sec + 600, 1 ]);
    is($r, 1, 'once the first expired: 1');
    is_deeply($a->{$SIGNINS}{value}, [ $p2, $sec + 1200 ], '... it left the set');
    $t->redis('DEL', $p1, $p2, $SIGNINS);
};

# oauth_grant's ARGV: mode, client_id, proof, resource, now, new refresh
# hash, access jti, its exp, refresh ttl, redirect_uri
sub grant_argv {
    my (%o) = @_;
    my %d = (mode => 'code', client => $code_argv[0], proof => 'CHAL', resource => '',
             now => $sec, new => 'h1', jti => 'at-1', exp => $sec + 3600, ttl => 86400,
             redirect => $code_argv[1], checked => '', repos => '', label => '', %o);
    return [ @d{qw(mode client proof resource now new jti exp ttl redirect checked repos
                   label)} ];
}

subtest 'oauth_grant: code' => sub {
    my @k = ($FAM, $REV, $CH, $CODE, $REVX);
    my ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(proof => 'WRONG'));
    is_deeply($r, [ 'ERR', 'invalid_grant',
                    'PKCE verification failed: code_verifier does not match' ],
              'a wrong verifier: invalid_grant');
    is($a->{$CODE}{value}{used}, 1, '... the code is spent');
    ok(!exists $a->{$FAM}, '... no family');
    ($r) = script('oauth_grant', \@k, grant_argv());
    is($r->[1], 'invalid_grant', 'then the right one: invalid_grant (spent)');

    $t->redis('HDEL', $CODE, 'used');
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(redirect => 'https://other/cb'));
    like($r->[2], qr/redirect_uri differs/, 'another redirect_uri: refused');
    $t->redis('HDEL', $CODE, 'used');
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv());
    is_deeply($r, [ 'OK', 'alice', '["acme/*"]', $sec + 3600 ], 'redeemed');
    is_deeply($a->{$FAM}{value}, { client_id => $code_argv[0], sub => 'alice',
        repos => '["acme/*"]', resource => 'http://h/mcp', key_jti => 'key-1',
        key_exp => $sec + 3600, current => 'h1', access_jti => 'at-1',
        access_exp => $sec + 3600, github => '', label => '' }, '... the family');
    ok($a->{$FAM}{expires}, '... expiring');

    my $sub = $t->redis_connect;
    $sub->subscribe($CH);
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv());
    like($r->[2], qr/already used/, 'reused: refused');
    ok(!exists $a->{$FAM}, '... the family is gone');
    is($a->{$REV}{value}{'at-1'}, $sec + 3600, '... its access token revoked');
    is_deeply($a->{$REVX}{value}, [ 'at-1', $sec + 3600 ], '... indexed by its exp');
    is($sub->next_message(5)->[1], "at-1 " . ($sec + 3600), '... and published');
    $sub->close;

    $t->redis('DEL', $CODE);
    ($r) = script('oauth_grant', \@k, grant_argv());
    like($r->[2], qr/unknown or expired/, 'gone: refused');
    $t->redis('HSET', $CODE, client_id => $code_argv[0], redirect_uri => $code_argv[1],
              challenge => 'CHAL', resource => 'http://h/mcp', sub => 'alice', repos => '',
              key_jti => '', key_exp => $sec + 3600, exp => $sec - 1);
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv());
    like($r->[2], qr/expired/, 'past its exp: refused');
    ok(!exists $a->{$FAM}, '... no family');
};

subtest 'oauth_grant: refresh, revoke' => sub {
    my @k = ($FAM, $REV, $CH, '', $REVX);
    my %fam = (client_id => $code_argv[0], sub => 'alice', repos => '',
               resource => 'http://h/mcp', key_jti => 'key-2', key_exp => $sec + 3600,
               current => 'h1', access_jti => 'at-1', access_exp => $sec + 3600);
    my %rf = (mode => 'refresh', proof => 'h1', new => 'h2', jti => 'at-2',
              exp => $sec + 7200, redirect => '');
    $t->redis('HSET', $FAM, %fam);
    my ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf));
    is_deeply($r, [ 'OK', 'alice', '', $sec + 3600 ], 'rotated');
    is($a->{$FAM}{value}{current}, 'h2', '... the new hash is the live one');
    is($a->{$FAM}{value}{access_jti}, 'at-2', '... with its access token');
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf, resource => 'http://x/mcp',
                                                         proof => 'h2'));
    is($r->[1], 'invalid_target', 'another resource: invalid_target');
    unchanged($b, $a, 'invalid_target');
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf));
    like($r->[2], qr/already used/, 'the spent one: refused');
    ok(!exists $a->{$FAM}, '... the family revoked');
    is($a->{$REV}{value}{'at-2'}, $sec + 7200, '... its access token too');

    $t->redis('HSET', $FAM, %fam);
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf, client => 'mcp_other'));
    like($r->[2], qr/already used/, 'another client: refused, revoked');
    ok(!exists $a->{$FAM}, '... the family revoked');

    $t->redis('HSET', $FAM, %fam);
    $t->redis('HSET', $REV, 'key-2', $sec + 3600);
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf));
    like($r->[2], qr/revoked/, 'the access key revoked: refused');
    ok(!exists $a->{$FAM}, '... the family deleted');

    $t->redis('HSET', $FAM, %fam);
    ($r, $b, $a) = script('oauth_grant', \@k, [ 'revoke', '', 'nope' ]);
    is_deeply($r, [ 'OK' ], 'revoke with another hash: OK');
    unchanged($b, $a, 'revoke with another hash');
    ($r, $b, $a) = script('oauth_grant', \@k, [ 'revoke', '', 'h1' ]);
    is_deeply($r, [ 'OK' ], 'revoke: OK');
    ok(!exists $a->{$FAM}, '... the family gone');
    ($r) = script('oauth_grant', \@k, grant_argv(%rf));
    like($r->[2], qr/unknown/, 'then: unknown');

    # a GitHub sign-in's family: GitHub asked again before each rotation
    $t->redis('HSET', $FAM, %fam, sub => 'github-7', key_jti => '', github => 'SEALED',
              label => 'octo');
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf));
    is_deeply($r, [ 'GITHUB', 'SEALED', 'github-7' ],
              'a GitHub grant: GITHUB, its sealed token and tenant first');
    unchanged($b, $a, 'GITHUB');
    ($r, $b, $a) = script('oauth_grant', \@k, grant_argv(%rf, checked => '1',
                                                         repos => '["acme/docs"]',
                                                         label => 'octo-new'));
    is_deeply($r, [ 'OK', 'github-7', '["acme/docs"]', $sec + 3600 ],
              'then, GitHub asked: rotated, with the grant the rules give now');
    is($a->{$FAM}{value}{label}, 'octo-new', '... the login now as its label');
    is($a->{$FAM}{value}{github}, 'SEALED', '... the sealed token kept');
    ($r) = script('oauth_grant', \@k, grant_argv(%rf, checked => '1'));
    like($r->[2], qr/already used/, '... the spent token again: refused, revoked');
};

subtest 'oauth_github' => sub {
    my $BOUND = "${P}oauth:github:bound";
    my @rules = ('login:octo', 'id:42', 'org:acme', 'login:other');
    my $match = sub {
        my ($uid, $login, $orgs) = @_;
        return script('oauth_github', [ $BOUND ], [ $uid, $login, $orgs, @rules ]);
    };
    my ($r, $b, $a) = $match->(7, 'octo', '');
    is($r, 1, 'a login rule: 1');
    is_deeply($a->{$BOUND}{value}, { 'login:octo' => 7 }, '... bound to the id it let in');
    ($r, $b, $a) = $match->(8, 'octo', '');
    is($r, 0, 'another id with that login: 0');
    unchanged($b, $a, 'another id');
    ($r) = $match->(7, 'octo-renamed', '');
    is($r, 1, 'the bound id under another login: 1');
    ($r) = $match->(42, 'whoever', '');
    is($r, 2, 'id:42: 2');
    ($r, $b, $a) = $match->(9, 'nine', '100:acme,200:other');
    is($r, 3, 'a member of acme: 3');
    is($a->{$BOUND}{value}{'org:acme'}, 100, '... the rule bound to the organization\'s id');
    ($r) = $match->(10, 'ten', '300:acme');
    is($r, 0, 'a member of another "acme": 0');
    ($r) = $match->(11, 'eleven', '100:acme-renamed');
    is($r, 3, 'a member of the bound one, renamed: 3');
    ($r) = $match->(7, 'octo', '100:acme');
    is($r, 1, "the user's rules come before the organizations'");
    ($r, $b, $a) = $match->(12, 'twelve', '');
    is($r, 0, 'no rule: 0');
    unchanged($b, $a, 'no rule');
};

###############################################################################
# revoked token ids: revoke (make revoke, /oauth/revoke), revoked_load (a
# worker's copy)

subtest 'revoke' => sub {
    $t->redis('DEL', $REV, $REVX);
    my $BUD = "${P}oauth:revokes:rita";
    my @k = ($REV, $REVX, $CH);
    my $sub = $t->redis_connect;
    $sub->subscribe($CH);
    my ($r, $b, $a) = script('revoke', \@k, [ 'j1', $sec + 100, $sec ]);
    is($r, 1, 'revoked: 1');
    is_deeply($a->{$REV}{value}, { j1 => $sec + 100 }, '... the id with its exp');
    is_deeply($a->{$REVX}{value}, [ 'j1', $sec + 100 ], '... indexed by it');
    is($sub->next_message(5)->[1], 'j1 ' . ($sec + 100), '... published');
    ($r, $b, $a) = script('revoke', \@k, [ 'j1', $sec + 50, $sec ]);
    is($r, 1, 'again with an earlier exp: 1');
    unchanged($b, $a, 'an earlier exp');
    ($r, $b, $a) = script('revoke', \@k, [ 'j0', $sec - 1, $sec ]);
    is($r, 1, 'a token already expired: 1');
    unchanged($b, $a, 'already expired');
    ($r, $b, $a) = script('revoke', \@k, [ 'j2', $sec + 300, $sec + 200 ]);
    is_deeply($a->{$REV}{value}, { j2 => $sec + 300 }, 'the expired ones dropped on the way');
    is_deeply($a->{$REVX}{value}, [ 'j2', $sec + 300 ], '... from the index too');

    my @kb = (@k, $BUD);
    for my $i (1 .. 2) {
        ($r) = script('revoke', \@kb, [ "b$i", $sec + 100, $sec, 2, 60 ]);
        is($r, 1, "a tenant's revocation $i of 2: 1");
    }
    ($r) = script('revoke', \@kb, [ 'b1', $sec + 200, $sec, 2, 60 ]);
    is($r, 1, '... an id it revoked already, later: 1 (not counted)');
    ($r, $b, $a) = script('revoke', \@kb, [ 'b3', $sec + 100, $sec, 2, 60 ]);
    ok($r < 0 && $r >= -60, "a third: $r (the budget spent, renewed in seconds)");
    unchanged($b, $a, 'budget spent');
    is($t->redis('GET', $BUD), 2, '... the budget counted 2');
    ok($t->redis('TTL', $BUD) > 0, '... for the window');
    $sub->close;
};

subtest 'run_meter' => sub {
    my $run = id('run_', 'm');
    my $K = "${P}run:$run";
    $t->redis('DEL', $K);
    $t->redis('HSET', $K, tenant => 'alice', status => 'running');
    my ($r, $b, $a) = script('run_meter', [ $K ], [ 'alice', 1000, 500, 20, 4, '0.010500000', 0 ]);
    is($r, '0.0105', 'the run\'s metered cost after the request');
    is_deeply({ map { $_ => $a->{$K}{value}{$_} } grep { /^metered_/ } keys %{ $a->{$K}{value} } },
              { metered_input => 1000, metered_output => 500, metered_cache_read => 20,
                metered_cache_write => 4, metered_cost => '0.0105' },
              '... the totals, nothing unpriced');
    ($r, $b, $a) = script('run_meter', [ $K ], [ 'alice', 7, 3, 0, 0, '0.000000000', 1 ]);
    is($r, '0.0105', 'an unpriced request: the cost unchanged');
    is($a->{$K}{value}{metered_input}, 1007, '... its tokens counted');
    is($a->{$K}{value}{metered_cache_read}, 20, '... a 0 adds nothing');
    is($a->{$K}{value}{metered_unpriced}, 1, '... metered_unpriced');
    ($r, $b, $a) = script('run_meter', [ $K ], [ 'bob', 1000, 500, 0, 0, '5', 0 ]);
    ok(!defined $r, "another tenant's run: nil");
    unchanged($b, $a, "another tenant's run");
    ($r, $b, $a) = script('run_meter', [ $K ], [ 'alice', -5, 'x', '1e400', '', 'nan', 0 ]);
    is($r, '0.0105', 'bad numbers: nothing added');
    unchanged($b, $a, 'bad numbers');
    my $gone = "${P}run:" . id('run_', 'g');
    ($r, $b, $a) = script('run_meter', [ $gone ], [ 'alice', 1000, 500, 0, 0, '1', 0 ]);
    ok(!defined $r, 'a run that is gone: nil');
    ok(!exists $a->{$gone}, '... not made anew');
};

subtest 'revoked_load' => sub {
    $t->redis('DEL', $REV, $REVX);
    $t->redis('HSET', $REV, 'a', $sec - 10, 'b', $sec + 10, 'c', $sec + 20);
    $t->redis('ZADD', $REVX, $sec - 10, 'a', $sec + 10, 'b', $sec + 20, 'c');
    my ($r, $b, $a) = script('revoked_load', [ $REV, $REVX ], [ $sec, 1, 1000 ]);
    is($r, 2, 'more than the worker holds: their number (the expired one dropped)');
    ok(!exists $a->{$REV}{value}{a}, '... the expired one gone');
    ($r) = script('revoked_load', [ $REV, $REVX ], [ $sec, 5, 1000 ]);
    is_deeply({ @$r }, { b => $sec + 10, c => $sec + 20 }, 'else the ids and their exp');
    $t->redis('HSET', $REV, 'x', $sec - 5, 'y', $sec - 5);
    $t->redis('ZADD', $REVX, $sec - 5, 'x', $sec - 5, 'y');
    ($r, $b, $a) = script('revoked_load', [ $REV, $REVX ], [ $sec, 5, 1 ]);
    is(scalar(keys %{ $a->{$REV}{value} }), 3, 'at most ARGV[3] expired ones dropped at once');
};

$mon->close;
done_testing();
