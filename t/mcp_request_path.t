#!/usr/bin/perl

# The request path's economies (issue 13) keep every check, against a real
# nginx (one worker: every request after a token's first meets that
# worker's cache of verified tokens) and Redis (append-only file on):
#
# - the token cache: a token that differs from a cached one in any byte (a
#   tampered signature, a payload swapped under a valid signature, a byte
#   appended) is refused, every time; a cached token past its exp is
#   refused ("token expired"); a cached token revoked (smcp-token --revoke)
#   is refused at once and ever after, also when the worker's revoked set
#   is not trusted (Redis asked); a cached token keeps its grants (the
#   "repos" claim: a list, none, missing) and its tenant exactly.
# - a tool's answer written from the JSON text of its structuredContent
#   (no second serialisation): the same document as before, byte for byte
#   the text content equal to structuredContent's JSON, for hostile run
#   fields (quotes, backslashes, control characters, </script>, U+2028,
#   non-ASCII) and hostile request ids (strings with quotes and escapes,
#   numbers, null refused as before).
# - no Redis write on a read: a read-only load (ping, get_result) leaves
#   the append-only file as it was and runs no PEXPIRE; the session's TTL
#   is refreshed once less than half of it is left.
# - one Redis round trip for a get_result: the run's HGETALL is sent with
#   the session script (Redis reads both at once); a waiting get_result, a
#   wrong session, another tenant's run, an unknown or malformed runId, a
#   revoked token, Redis having lost its scripts answer as before.
# - the session lookup without a script (HMGET, PTTL, pipelined): no Lua
#   on a read; the TTL refreshed by session_touch once below half (301 s
#   of 600 left alone, 299.999 s refreshed, no TTL given one); an expiring
#   session served and refreshed, an expired or deleted one 404; another
#   tenant, a prefix of it, no tenant field: 404; no protocol stored:
#   served; the key of another type: 503.
# - ping's answer written as text: byte for byte json_dumps()'s for
#   integer and string ids, with a progressToken, in a batch.
# - the watchUrl kept by the worker: polls of a run get the same link
#   while less than half of its lifetime (sandbox_mcp_ui_token_ttl, 4 s
#   here) has passed, then a new one; a revoked link is replaced at once;
#   another run gets its own.
# - the run object written as text (no jansson values): byte for byte what
#   json_dumps() wrote for it, for hostile and odd run hashes (the lines
#   after __DATA__ were taken from the jansson build); run_task's answer
#   too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode json_decode now_ms wait_until tool_ok tool_err b64url);

my $t = SMCP::Test->new(workers => 1, redis_appendonly => 1,
                        location => 'sandbox_mcp_session_ttl 600s; '
                                    . 'sandbox_mcp_ui_token_ttl 4s;');
$t->start;

my $P = 'smcp:';
my $ping = { jsonrpc => '2.0', id => 1, method => 'ping' };

sub session_for {
    my ($tok) = @_;
    my ($sid) = $t->initialize(token => $tok);
    ok($sid, 'a session') or SMCP::Test::give_up('no session');
    return $sid;
}

# status of a ping, and whether the 401 said why
sub ping_status {
    my ($tok, $sid) = @_;
    my $r = $t->mcp_post($ping, token => $tok, session => $sid);
    my $why = ($r->{headers}{'www-authenticate'} // '') =~ /error_description="([^"]*)"/
            ? $1 : '';
    return wantarray ? ($r->{status}, $why) : $r->{status};
}

sub statuses {
    my ($tok, $sid, $n) = @_;
    my %st;
    for (1 .. $n) {
        my ($s, $why) = ping_status($tok, $sid);
        $st{$s}++;
        $st{$why}++ if $why;
    }
    return \%st;
}

###############################################################################
# tampered tokens never come from the cache

{
    my $tok = $t->token(sub => 'alice', jti => 'tamper-1');
    my $sid = session_for($tok);
    is_deeply(statuses($tok, $sid, 3), { 200 => 3 }, 'the token works (cached now)');

    my ($h, $p, $s) = split /\./, $tok;
    my $flip = substr($s, -2, 1) eq 'A' ? 'B' : 'A';
    my %bad = (
        'a signature byte changed' => "$h.$p." . substr($s, 0, -2) . $flip . substr($s, -1),
        'a byte appended'          => "${tok}A",
        'a byte cut'               => substr($tok, 0, -1),
        'the payload swapped (sub bob) under its signature' =>
            "$h." . (split /\./, $t->token(sub => 'bob', jti => 'tamper-1'))[1] . ".$s",
        'the payload swapped (exp later) under its signature' =>
            "$h." . (split /\./, $t->token(sub => 'alice', jti => 'tamper-1',
                                          exp => time() + 86400))[1] . ".$s",
    );
    for my $what (sort keys %bad) {
        is_deeply(statuses($bad{$what}, $sid, 3), { 401 => 3, 'bad token signature' => 3 },
                  "$what: refused, 3 times in a row")
            or diag(json_encode(statuses($bad{$what}, $sid, 1)));
    }
    is_deeply(statuses($tok, $sid, 2), { 200 => 2 }, 'the untampered token still works');
}

###############################################################################
# expiry: the cache serves a token until its exp, never after

{
    my $exp = int(time()) + 3;
    my $tok = $t->token(sub => 'alice', exp => $exp);
    my $sid = session_for($tok);
    is_deeply(statuses($tok, $sid, 3), { 200 => 3 }, 'a token 3 s from its exp works');
    sleep(0.1) while time() < $exp + 0.2;
    is_deeply(statuses($tok, $sid, 3), { 401 => 3, 'token expired' => 3 },
              'past its exp: refused ("token expired"), 3 times in a row');
}

# an exp far beyond any time_t: served, cached, served again
{
    my $tok = $t->token(sub => 'alice', exp => 1e300);
    my $sid = session_for($tok);
    is_deeply(statuses($tok, $sid, 3), { 200 => 3 }, 'exp 1e300: works, 3 times');
}

###############################################################################
# revocation: checked on every request, cached or not

my $bin = SMCP::Test::token_tool_path();
my $redis_addr = '127.0.0.1:' . $t->redis_port;

sub cli_token {
    my $sf = $t->secret_file;
    my $tok = `$bin --sub rv --repos '*' --secret-file $sf`;
    chomp $tok;
    return $tok;
}

{
    my $tok = cli_token();
    my (undef, $cl) = SMCP::Test::decode_jwt($tok);
    my $sid = session_for($tok);
    is_deeply(statuses($tok, $sid, 5), { 200 => 5 }, 'a token with an id works (cached)');
    my $out = `$bin --revoke '$tok' --redis $redis_addr 2>&1`;
    is($? >> 8, 0, 'smcp-token --revoke') or diag($out);
    ok(wait_until(30, sub { ping_status($tok, $sid) == 401 }), 'revoked: refused');
    is_deeply(statuses($tok, $sid, 5), { 401 => 5, 'token revoked' => 5 },
              '... 5 times in a row ("token revoked")');

    # behind the worker's back, with its revoked set untrusted: Redis asked
    my $tok2 = cli_token();
    my (undef, $c2) = SMCP::Test::decode_jwt($tok2);
    my $sid2 = session_for($tok2);
    is_deeply(statuses($tok2, $sid2, 3), { 200 => 3 }, 'another token works (cached)');
    $t->redis('HSET', "${P}revoked", $c2->{jti}, $c2->{exp});
    $t->redis('CLIENT', 'KILL', 'TYPE', 'pubsub');
    is_deeply(statuses($tok2, $sid2, 5), { 401 => 5, 'token revoked' => 5 },
              'revoked silently, the pub/sub reconnecting: refused from Redis\'s word');
}

###############################################################################
# a cached token keeps its grants and its tenant exactly

{
    my $gh = 'https://github.com';
    my %case = (
        'repos [acme/app]' => [ [ 'acme/app' ], qr{it may name only: acme/app\.} ],
        'no repos claim'   => [ undef, qr/grants no repositories/ ],
        'repos []'         => [ [], qr/grants no repositories/ ],
    );
    for my $what (sort keys %case) {
        my ($repos, $re) = @{ $case{$what} };
        my $tok = $t->token(sub => 'grants', repos => $repos);
        my $sid = session_for($tok);
        for my $n (1, 2, 3) {
            tool_err(scalar $t->call_tool($sid, 'opencode_run_task',
                                          { task => 't', repository => "$gh/evil/app" },
                                          token => $tok),
                     $re, "$what, call $n: another repository refused");
        }
        if ($repos && @$repos) {
            tool_ok(scalar $t->call_tool($sid, 'opencode_run_task',
                                         { task => 't', repository => "$gh/acme/app" },
                                         token => $tok),
                    "$what: its repository accepted (cached)");
        }
    }

    # two tenants in turn: each sees its own runs only
    my $ta = $t->token(sub => 'ta');
    my $tb = $t->token(sub => 'tb');
    my ($sa, $sb) = (session_for($ta), session_for($tb));
    my $ra = tool_ok(scalar $t->call_tool($sa, 'opencode_run_task', { task => 'a' },
                                          token => $ta), 'ta runs');
    for (1 .. 3) {
        tool_ok(scalar $t->call_tool($sa, 'opencode_get_result', { runId => $ra->{runId} },
                                     token => $ta), "ta reads its run ($_)");
        tool_err(scalar $t->call_tool($sb, 'opencode_get_result', { runId => $ra->{runId} },
                                      token => $tb),
                 qr/not found/, "tb does not see it ($_)");
    }
    # a session of ta's with tb's (cached) token: not found
    my $r = $t->mcp_post($ping, token => $tb, session => $sa);
    is($r->{status}, 404, "tb's token on ta's session: 404");
}

###############################################################################
# a tool's answer written from its text

{
    my $tok = $t->token(sub => 'writer');
    my $sid = session_for($tok);
    my $run = tool_ok(scalar $t->call_tool($sid, 'opencode_run_task', { task => 'w' },
                                           token => $tok), 'a run')->{runId};
    my $nasty = qq{q"uote \\back\\slash\n\r\t\b\f\x01\x1f\x7f </script> \x{2028} caf\x{e9} \x{1F600} {"a":[1]}};
    my $bytes = $nasty;
    utf8::encode($bytes);
    $t->redis('HSET', "${P}run:$run", result => $bytes, error => "e\"\\", title => "t\x7f",
              files_changed => '["a\\"b.c","d\\\\e\\u0001"]');
    for my $id ('id"with\\quotes\n', 'x' x 200, 42, -1, '') {
        my $r = $t->mcp_post({ jsonrpc => '2.0', id => $id, method => 'tools/call',
                               params => { name => 'opencode_get_result',
                                           arguments => { runId => $run } } },
                             token => $tok, session => $sid);
        my $j = $r->{json};
        my $label = 'id ' . json_encode($id);
        is($r->{status}, 200, "$label: 200");
        is(ref $j, 'HASH', "$label: one JSON document") or next;
        is_deeply([ sort keys %$j ], [qw(id jsonrpc result)], "$label: jsonrpc, id, result");
        is(json_encode($j->{id}), json_encode($id), "$label: the id echoed as it came");
        my $res = $j->{result};
        is_deeply([ sort keys %$res ], [qw(content structuredContent)],
                  "$label: content and structuredContent");
        my $sc = $res->{structuredContent};
        is($sc->{result}, $nasty, "$label: the hostile result text intact");
        is($sc->{error}, "e\"\\", "$label: the error text intact");
        is_deeply($sc->{filesChanged}, [ 'a"b.c', "d\\e\x{1}" ], "$label: filesChanged intact");
        is(scalar @{ $res->{content} }, 1, "$label: one content block");
        is($res->{content}[0]{type}, 'text', "$label: a text block");
        is_deeply(SMCP::Test::json_decode_text($res->{content}[0]{text}), $sc,
                  "$label: its text is structuredContent's JSON");
        like($r->{body}, qr/\}\n\z/, "$label: the body ends with a newline, as before");
        unlike(substr($r->{body}, 0, -1), qr/[\x00-\x1f]/,
               "$label: no raw control character in the body");
    }
    # the hostile text at every offset of an 8-byte word (the escaping
    # skips words that need none)
    for my $pad (0 .. 8) {
        my $text = ('x' x $pad) . $nasty . ('y' x (8 - $pad));
        my $b = $text;
        utf8::encode($b);
        $t->redis('HSET', "${P}run:$run", result => $b);
        my $pr = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                              arguments => { runId => $run } }),
                              token => $tok, session => $sid);
        my $psc = $pr->{json}{result}{structuredContent} // {};
        ok(($psc->{result} // '') eq $text
           && json_encode(SMCP::Test::json_decode_text($pr->{json}{result}{content}[0]{text}
                                                        // '{}')) eq json_encode($psc),
           "the hostile text $pad bytes in: intact, its text structuredContent's JSON");
    }
    $t->redis('HSET', "${P}run:$run", result => $bytes);

    # an answer larger than the socket takes at once: its parts are sent
    # as the client reads
    my $big = join '', map { chr(32 + $_ % 90) } 1 .. 3_000_000;
    $t->redis('HSET', "${P}run:$run", result => $big);
    my $br = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                          arguments => { runId => $run } }),
                          token => $tok, session => $sid);
    ok(($br->{json}{result}{structuredContent}{result} // '') eq $big,
       'a 3 MB result: answered whole');
    is_deeply(SMCP::Test::json_decode_text($br->{json}{result}{content}[0]{text} // '{}'),
              $br->{json}{result}{structuredContent}, '... its text is structuredContent\'s JSON');
    $t->redis('HSET', "${P}run:$run", result => $bytes);

    # a batch (2025-03-26) and errors still go the general way
    my $r = $t->mcp_post({ jsonrpc => '2.0', id => 7, method => 'tools/call',
                           params => { name => 'opencode_get_result',
                                       arguments => { runId => 'run_nope' } } },
                         token => $tok, session => $sid);
    ok($r->{json}{result}{isError}, 'an unknown run: isError, as before');

    # a batch takes the general way: the run object's text parsed into a
    # value, the same document as a lone answer
    my $lone = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                            arguments => { runId => $run } }),
                            token => $tok, session => $sid)->{json}{result};
    my ($bsid) = $t->initialize(token => $tok, version => '2025-03-26');
    my @batch = map { { jsonrpc => '2.0', id => $_, method => 'tools/call',
                        params => { name => 'opencode_get_result',
                                    arguments => { runId => $run } } } } 1 .. 2;
    $r = $t->mcp_post(\@batch, token => $tok, session => $bsid, version => '2025-03-26');
    is(ref $r->{json}, 'ARRAY', 'a batch of two get_results: an array') or diag($r->{body});
    # (the links may differ: the worker's revoked set is not trusted yet
    # after the pub/sub connection was killed above, so each is new)
    my $no_link = sub {
        my ($res) = @_;
        my $sc = { %{ $res->{structuredContent} || {} } };
        like(delete $sc->{watchUrl} // '', qr{/ui/runs/\Q$run\E\?token=}, '... a watchUrl');
        return $sc;
    };
    my $lone_sc = $no_link->($lone);
    for my $a (@{ ref $r->{json} eq 'ARRAY' ? $r->{json} : [] }) {
        is_deeply($no_link->($a->{result}), $lone_sc,
                  "batch answer $a->{id}: the lone answer's run object");
        is_deeply(SMCP::Test::json_decode_text($a->{result}{content}[0]{text}),
                  $a->{result}{structuredContent}, '... its text is structuredContent\'s JSON');
    }
}

###############################################################################
# no Redis write on a read

sub info_field {
    my ($section, $re) = @_;
    my $info = $t->redis('INFO', $section);
    return ($info =~ $re)[0] // 0;
}
sub pexpires { info_field('commandstats', qr/^cmdstat_pexpire:calls=(\d+)/m) }
sub aof_size { info_field('persistence', qr/^aof_current_size:(\d+)/m) }

{
    my $tok = $t->token(sub => 'reader');
    my $sid = session_for($tok);
    my $run = tool_ok(scalar $t->call_tool($sid, 'opencode_run_task', { task => 'r' },
                                           token => $tok), 'a run to read')->{runId};
    my $key = "${P}mcp:$sid";
    ok($t->redis('PTTL', $key) > 590_000, 'the session has its ttl (600 s)');

    ok(wait_until(5, sub { my $a = aof_size(); sleep(0.3); $a == aof_size() }),
       'the append-only file is still');
    my ($px0, $aof0) = (pexpires(), aof_size());
    ok($aof0 > 0, "append-only file on ($aof0 bytes)");
    for (1 .. 50) {
        ping_status($tok, $sid) == 200 or fail('ping');
        tool_ok(scalar $t->call_tool($sid, 'opencode_get_result', { runId => $run },
                                     token => $tok), "get_result $_") if $_ % 10 == 0;
        $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                     arguments => { runId => $run } }),
                     token => $tok, session => $sid)->{status} == 200
            or fail('get_result');
    }
    is(pexpires() - $px0, 0, '100 pings and get_results: no PEXPIRE');
    sleep(0.3);
    is(aof_size() - $aof0, 0, '... and the append-only file did not grow');

    # less than half left: the next request refreshes it
    $t->redis('PEXPIRE', $key, 290_000);
    my $px1 = pexpires();
    is(ping_status($tok, $sid), 200, 'a ping with 290 s of 600 left');
    ok($t->redis('PTTL', $key) > 590_000, '... refreshed the ttl');
    is(pexpires() - $px1, 1, '... by one PEXPIRE');

    $t->redis('PEXPIRE', $key, 310_000);
    is(ping_status($tok, $sid), 200, 'a ping with 310 s of 600 left');
    ok($t->redis('PTTL', $key) <= 310_000, '... left the ttl alone');
}

###############################################################################
# one round trip for a get_result

{
    my $tok = $t->token(sub => 'trip');
    my $sid = session_for($tok);
    my $run = tool_ok(scalar $t->call_tool($sid, 'opencode_run_task', { task => 'rt' },
                                           token => $tok), 'a run')->{runId};
    my $calls = sub { info_field('commandstats', qr/^cmdstat_\Q$_[0]\E:calls=(\d+)/m) };
    my $reads = sub { info_field('stats', qr/^total_reads_processed:(\d+)/m) };
    my @cmds = qw(evalsha hmget pttl hgetall);
    my %c0 = map { $_ => $calls->($_) } @cmds;
    my $rd0 = $reads->();
    for (1 .. 20) {
        my $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result', { runId => $run },
                                              token => $tok), "get_result $_");
        is($sc->{runId}, $run, '... of the run') if $_ == 1;
    }
    my $rd = $reads->() - $rd0;
    is_deeply({ map { $_ => $calls->($_) - $c0{$_} } @cmds },
              { evalsha => 0, hmget => 20, pttl => 20, hgetall => 20 },
              '20 get_results: 20 session lookups (HMGET, PTTL: no script) and 20 HGETALLs');
    ok($rd < 30, "... sent together: Redis read $rd times (two round trips: 40 and more)");
    my $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result',
                                          { runId => $run, waitSeconds => 0 }, token => $tok),
                     'waitSeconds 0: read along too');
    is($sc->{runId}, $run, '... the run');
    $t->redis('HSET', "${P}run:$run", status => 'completed');
    $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result',
                                       { runId => $run, waitSeconds => 2 }, token => $tok),
                  'waitSeconds 2 on an ended run');
    is($sc->{status}, 'completed', '... answers at once with it');

    my $other = $t->token(sub => 'intruder');
    my $osid = session_for($other);
    my $res = $t->call_tool($osid, 'opencode_get_result', { runId => $run }, token => $other);
    tool_err($res, qr/Run not found/, "another tenant's run");
    unlike(json_encode($res), qr/"rt"|completed/, '... nothing of it shown');
    tool_err(scalar $t->call_tool($sid, 'opencode_get_result',
                                  { runId => 'run_' . ('0' x 24) }, token => $tok),
             qr/Run not found/, 'an unknown run');
    tool_err(scalar $t->call_tool($sid, 'opencode_get_result',
                                  { runId => 'run_x:*' }, token => $tok),
             qr/is not a runId/, 'a malformed runId');

    my $r = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                         arguments => { runId => $run } }),
                         token => $other, session => $sid);
    is($r->{status}, 404, "another tenant's session: 404");
    unlike($r->{body}, qr/\Q$run\E|completed/, '... nothing of the run');

    $t->redis('SCRIPT', 'FLUSH');
    $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result', { runId => $run },
                                       token => $tok), 'Redis lost its scripts (SCRIPT FLUSH)');
    is($sc->{status}, 'completed', '... the run read all the same');
    $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result', { runId => $run },
                                       token => $tok), '... and again');
    is($sc->{runId}, $run, '... the run');
}

###############################################################################
# ping's answer written as text: byte for byte what json_dumps() wrote

{
    my $tok = $t->token(sub => 'pinger');
    my $sid = session_for($tok);
    my %ids = (
        '1' => '1', '0' => '0', '-7' => '-7',
        '9223372036854775807' => '9223372036854775807',
        '-9223372036854775808' => '-9223372036854775808',
        '"s\\"q\\\\"' => '"s\\"q\\\\"', '""' => '""',
        '"\\u2028\\u0001\\/"' => qq{"\x{e2}\x{80}\x{a8}\\u0001/"},
    );
    for my $in (sort keys %ids) {
        my $r = $t->mcp_post(qq({"jsonrpc":"2.0","id":$in,"method":"ping"}),
                             token => $tok, session => $sid);
        is($r->{status}, 200, "ping, id $in: 200");
        is($r->{body}, qq({"jsonrpc":"2.0","id":$ids{$in},"result":{}}\n),
           "... the answer as jansson wrote it");
    }
    my $r = $t->mcp_post('{"jsonrpc":"2.0","id":3,"method":"ping",'
                         . '"params":{"_meta":{"progressToken":"p"}}}',
                         token => $tok, session => $sid);
    is($r->{body}, qq({"jsonrpc":"2.0","id":3,"result":{}}\n), 'ping with a progressToken');
    my ($bsid) = $t->initialize(token => $tok, version => '2025-03-26');
    $r = $t->mcp_post('[{"jsonrpc":"2.0","id":1,"method":"ping"},'
                      . '{"jsonrpc":"2.0","method":"notifications/initialized"},'
                      . '{"jsonrpc":"2.0","id":"b","method":"ping"}]',
                      token => $tok, session => $bsid, version => '2025-03-26');
    is($r->{body}, qq([{"jsonrpc":"2.0","id":1,"result":{}},)
                   . qq({"jsonrpc":"2.0","id":"b","result":{}}]\n),
       'two pings in a batch: the general way, the same answers');
}

###############################################################################
# the session lookup without a script: what session_touch refused is
# refused, the TTL refreshed by the same rule (below half: session_touch)

{
    my $tok = $t->token(sub => 'edge');
    my $sid = session_for($tok);
    my $run = tool_ok(scalar $t->call_tool($sid, 'opencode_run_task', { task => 'edge' },
                                           token => $tok), 'a run')->{runId};
    my $key = "${P}mcp:$sid";
    my $calls = sub { info_field('commandstats', qr/^cmdstat_\Q$_[0]\E:calls=(\d+)/m) };
    my $count = sub {
        my ($what) = @_;
        my @c = qw(evalsha hmget pttl pexpire hgetall hexists);
        my %c0 = map { $_ => $calls->($_) } @c;
        my @r = $what->();
        return ({ map { $_ => $calls->($_) - $c0{$_} } @c }, @r);
    };
    my $get = sub {
        $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                     arguments => { runId => $run } }),
                     token => $tok, session => $sid);
    };

    my ($c) = $count->(sub { ping_status($tok, $sid) == 200 or fail('ping') for 1 .. 10 });
    is_deeply($c, { evalsha => 0, hmget => 10, pttl => 10, pexpire => 0, hgetall => 0,
                    hexists => 0 },
              '10 pings: HMGET and PTTL each, no script, no write');

    # the TTL around half of it (300 s of 600)
    $t->redis('PEXPIRE', $key, 301_000);
    ($c) = $count->(sub { is(ping_status($tok, $sid), 200, 'a ping with 301 s of 600 left') });
    ok($t->redis('PTTL', $key) <= 301_000, '... left the ttl alone');
    is($c->{pexpire} + $c->{evalsha}, 0, '... no script, no PEXPIRE');

    # (exactly half, 300,000 ms on arrival, is left alone as by session_touch:
    # PTTL < ttl / 2; a clock cannot hit it from here)
    $t->redis('PEXPIRE', $key, 299_999);
    ($c) = $count->(sub { is(ping_status($tok, $sid), 200, 'a ping with 1 ms under half left') });
    ok($t->redis('PTTL', $key) > 590_000, '... refreshed');
    is_deeply([ @$c{qw(evalsha pexpire)} ], [ 1, 1 ], '... by session_touch, one PEXPIRE');

    $t->redis('PEXPIRE', $key, 200_000);
    my $r;
    ($c, $r) = $count->($get);
    is($r->{status}, 200, 'a get_result with 200 s left');
    like($r->{body}, qr/"runId":"\Q$run\E"/, '... answers the run');
    ok($t->redis('PTTL', $key) > 590_000, '... refreshed the ttl');
    is_deeply([ @$c{qw(evalsha pexpire hgetall)} ], [ 1, 1, 2 ],
              '... by session_touch (the run read along dropped, read again)');

    $t->redis('PERSIST', $key);
    is(ping_status($tok, $sid), 200, 'a session without a TTL: served');
    ok($t->redis('PTTL', $key) > 590_000, '... and given its ttl, as session_touch does');

    # expiring and expired
    $t->redis('PEXPIRE', $key, 400);
    is(ping_status($tok, $sid), 200, 'a session 0.4 s from expiring: served');
    ok($t->redis('PTTL', $key) > 590_000, '... and refreshed');
    $t->redis('PEXPIRE', $key, 1);
    sleep(0.05);
    is(ping_status($tok, $sid), 404, 'an expired session: 404');
    $r = $get->();
    is($r->{status}, 404, '... get_result too');
    unlike($r->{body}, qr/\Q$run\E/, '... nothing of the run');

    # the hash itself
    my $sid2 = session_for($tok);
    my $key2 = "${P}mcp:$sid2";
    my %h = @{ $t->redis('HGETALL', $key2) };
    is($h{tenant}, 'edge', 'the session hash holds its tenant');
    $t->redis('HDEL', $key2, 'protocol');
    is(ping_status($tok, $sid2), 200, 'no protocol stored: served (the fallback version)');
    $t->redis('HSET', $key2, 'tenant', 'edgy');
    is(ping_status($tok, $sid2), 404, 'another tenant in the hash: 404');
    $t->redis('HSET', $key2, 'tenant', 'edg');
    is(ping_status($tok, $sid2), 404, '... a prefix of the tenant: 404');
    $t->redis('HSET', $key2, 'tenant', "edge\0");
    is(ping_status($tok, $sid2), 404, '... the tenant and a NUL: 404');
    $t->redis('HDEL', $key2, 'tenant');
    is(ping_status($tok, $sid2), 404, 'no tenant in the hash: 404');
    $t->redis('HSET', $key2, 'tenant', 'edge');
    is(ping_status($tok, $sid2), 200, 'its tenant again: served');
    $t->redis('DEL', $key2);
    ($c) = $count->(sub { is(ping_status($tok, $sid2), 404, 'a deleted session: 404') });
    is($c->{evalsha} + $c->{pexpire}, 0, '... nothing refreshed, no script');
    $t->redis('SET', $key2, 'a string');
    $t->allow_log(qr/sandbox_mcp: redis: WRONGTYPE/);
    is(ping_status($tok, $sid2), 503, 'the session key of another type: 503');
    is($t->redis('GET', $key2), 'a string', '... left as it was');
    $t->redis('DEL', $key2);

    # a session id we never issue: not looked up
    ($c) = $count->(sub { is(ping_status($tok, 'A' x 64), 404, 'a malformed session id: 404') });
    is($c->{hmget}, 0, '... not looked up');
}

###############################################################################
# the watchUrl kept by the worker

{
    my $tok = $t->token(sub => 'watcher');
    my $sid = session_for($tok);
    my @runs = map { tool_ok(scalar $t->call_tool($sid, 'opencode_run_task',
                                                  { task => "w$_" }, token => $tok),
                             "run $_")->{runId} } 1 .. 2;
    my $watch = sub {
        my ($run) = @_;
        my $sc = tool_ok(scalar $t->call_tool($sid, 'opencode_get_result',
                                              { runId => $run }, token => $tok),
                         'get_result');
        my $url = $sc->{watchUrl} // '';
        my ($jwt) = $url =~ /\?token=(.+)\z/;
        my (undef, $cl) = SMCP::Test::decode_jwt($jwt // '');
        return ($url, $cl || {});
    };
    my ($u1, $c1) = $watch->($runs[0]);
    is_deeply([ @$c1{qw(sub scope run)} ], [ 'watcher', 'ui', $runs[0] ],
              'watchUrl: a ui token of the run and tenant');
    is($c1->{exp} - $c1->{iat}, 4, '... living sandbox_mcp_ui_token_ttl');
    if (time() - $c1->{iat} < 1.5) {
        my ($u2) = $watch->($runs[0]);
        is($u2, $u1, 'polled again while young: the same link');
    }
    my ($o1, $oc) = $watch->($runs[1]);
    isnt($oc->{jti}, $c1->{jti}, 'another run: its own link');
    is($oc->{run}, $runs[1], '... for that run');

    $t->redis('HSET', "${P}revoked", $c1->{jti}, $c1->{exp});
    $t->redis('PUBLISH', "${P}revoked", "$c1->{jti} $c1->{exp}");
    ok(wait_until(30, sub { ($watch->($runs[0]))[1]{jti} ne $c1->{jti} }),
       'its id revoked: a new link');

    my (undef, $c3) = $watch->($runs[0]);
    sleep(0.2) while time() < $c3->{iat} + 2;
    my (undef, $c4) = $watch->($runs[0]);
    isnt($c4->{jti}, $c3->{jti}, 'half of its lifetime gone: a new link');
    ok($c4->{exp} - time() > 2, '... valid for more than half of the ttl');
}

###############################################################################
# the run object written as text: byte for byte what jansson wrote

{
    my $tok = $t->token(sub => 'texter');
    my $sid = session_for($tok);
    my @hashes = (
        { result => "r\"\\\n\x01\x1f\x7f </script> \xe2\x80\xa8 caf\xc3\xa9 \xf0\x9f\x98\x80 bad\xff\xfe\xc0\xaf end",
          error => '', repository => 'https://github.com/o/r', branch => '', model => "m\t",
          created_at => '1700000000123', started_at => '0', finished_at => 'x', exit_code => '-3',
          files_changed => ' [ "a\\"b" , "c\\u0001", "\\u00e9\\ud83d\\ude00" ] ', diff_stat => "1 file",
          pr_url => 'https://x/y', pr_status => 'open', tokens_input => '123', tokens_output => '-5',
          tokens_reasoning => 'abc', tokens_cache_read => '99999999999', tokens_cache_write => '',
          cost => '0.1', max_cost => '2.5e-5', timeout => '3600', cancel_requested => '1',
          status => 'completed', title => '', task => "t\x00nul", session => 'sess_1',
          create_pr => '1', base_branch => "ma\"in", pr_title => "</p>\x01", draft => '1',
          image => 'smcp-go:1' },
        { cost => '1e15', max_cost => '0', exit_code => '0', files_changed => '{"a":1}',
          cancel_requested => '0', created_at => '-5', tokens_input => '-0', cost_extra => '1' },
        { cost => '123456789.5', max_cost => '-1', files_changed => '[1, 2.5, null, true, {"k":[]}]',
          status => '' },
        { cost => 'nan', max_cost => '1e-300', files_changed => 'not json' },
        { cost => '3', max_cost => '0.30000000000000004', files_changed => '[]' },
        { cost => '-0', max_cost => '7', created_at => '1' },
        { cost => '-7.0', max_cost => '999999999999999', exit_code => '2' },
    );
    my $r = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_run_task',
                                                         arguments => { task => 'text' } }),
                         token => $tok, session => $sid);
    like($r->{body}, qr{"structuredContent":\{"runId":"run_[0-9a-f]{24}","sessionId":"ses_[0-9a-f]{24}","status":"started","watchUrl":"http://[^"/]+/ui/runs/run_[0-9a-f]{24}\?token=[A-Za-z0-9_.-]+"\}\}\}\n\z},
         'run_task: its answer as jansson wrote it');
    my @expected = map { chomp; $_ } <DATA>;
    for my $i (0 .. $#hashes) {
        my $run = tool_ok(scalar $t->call_tool($sid, 'opencode_run_task', { task => 'cap ' . ($i + 1) },
                                               token => $tok), "run $i")->{runId};
        $t->redis('HSET', "${P}run:$run", %{ $hashes[$i] });
        $t->redis('HDEL', "${P}run:$run", 'created_at') if $i == 4;
        my $r = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                             arguments => { runId => $run } }),
                             token => $tok, session => $sid);
        my ($sc) = $r->{body} =~ /"structuredContent":(.*)\}\}\n\z/s;
        $sc //= '';
        $sc =~ s/\Q$run\E/RUNID/g;
        $sc =~ s/ses_[0-9a-f]{24}/SES/g;
        $sc =~ s/"createdAt":"[^"]*"/"createdAt":"X"/ if $i != 0;
        $sc =~ s{"watchUrl":"http://[^/]+/ui/runs/RUNID\?token=[A-Za-z0-9_.-]+"}
                {"watchUrl":"http://HOST/ui/runs/RUNID?token=T"};
        ok($sc eq ($expected[$i] // ''), "run hash $i: the run object as jansson wrote it")
            or diag("got      $sc\nexpected $expected[$i]");
    }
}

###############################################################################
# get_result with a token revoked behind the worker's back (last: the
# worker's revoked set is untrusted a while after)

{
    my $rtok = cli_token();
    my (undef, $rc) = SMCP::Test::decode_jwt($rtok);
    my $rsid = session_for($rtok);
    my $rrun = tool_ok(scalar $t->call_tool($rsid, 'opencode_run_task', { task => 'rv' },
                                            token => $rtok), 'a run of a token to revoke')->{runId};
    $t->redis('HSET', "${P}revoked", $rc->{jti}, $rc->{exp});
    $t->redis('CLIENT', 'KILL', 'TYPE', 'pubsub');
    my $r = $t->mcp_post($t->request_msg('tools/call', { name => 'opencode_get_result',
                                                         arguments => { runId => $rrun } }),
                         token => $rtok, session => $rsid);
    is($r->{status}, 401, 'a token revoked behind the worker\'s back: 401 from the session script');
    unlike($r->{body}, qr/\Q$rrun\E|"rv"/, '... nothing of the run');
}

$t->shutdown;
is_deeply([ $t->bad_log_lines ], [], 'no unexpected error.log lines');

done_testing;

__DATA__
{"runId":"RUNID","sessionId":"sess_1","status":"completed","title":"","task":"t\u0000nul","repository":"https://github.com/o/r","branch":null,"model":"m\t","agent":"opencode","createdAt":"2023-11-14T22:13:20.123Z","startedAt":null,"finishedAt":null,"result":"r\"\\\n\u0001\u001F </script>   café 😀 bad???? end","error":null,"exitCode":-3,"filesChanged":["a\"b","c\u0001","é😀"],"diffStat":"1 file","pullRequestUrl":"https://x/y","pullRequestStatus":"open","tokens":{"input":123,"output":-5,"reasoning":0,"cacheRead":99999999999,"cacheWrite":0},"cost":0.10000000000000001,"meteredCostUsd":0.0,"maxCostUsd":2.5000000000000001e-5,"timeoutSeconds":3600,"createPullRequest":true,"baseBranch":"ma\"in","prTitle":"</p>\u0001","draft":true,"image":"smcp-go:1","cancelRequested":true,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
{"runId":"RUNID","sessionId":"SES","status":"started","title":"cap 2","task":"cap 2","repository":null,"branch":null,"model":"anthropic/claude-sonnet-4-5","agent":"opencode","createdAt":null,"startedAt":null,"finishedAt":null,"result":null,"error":null,"exitCode":0,"filesChanged":[],"diffStat":null,"pullRequestUrl":null,"pullRequestStatus":null,"tokens":{"input":0,"output":0,"reasoning":0,"cacheRead":0,"cacheWrite":0},"cost":1000000000000000.0,"meteredCostUsd":0.0,"maxCostUsd":null,"timeoutSeconds":3600,"createPullRequest":false,"baseBranch":null,"prTitle":null,"draft":false,"image":null,"cancelRequested":false,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
{"runId":"RUNID","sessionId":"SES","status":"","title":"cap 3","task":"cap 3","repository":null,"branch":null,"model":"anthropic/claude-sonnet-4-5","agent":"opencode","createdAt":"X","startedAt":null,"finishedAt":null,"result":null,"error":null,"exitCode":null,"filesChanged":[1,2.5,null,true,{"k":[]}],"diffStat":null,"pullRequestUrl":null,"pullRequestStatus":null,"tokens":{"input":0,"output":0,"reasoning":0,"cacheRead":0,"cacheWrite":0},"cost":123456789.5,"meteredCostUsd":0.0,"maxCostUsd":null,"timeoutSeconds":3600,"createPullRequest":false,"baseBranch":null,"prTitle":null,"draft":false,"image":null,"cancelRequested":false,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
{"runId":"RUNID","sessionId":"SES","status":"started","title":"cap 4","task":"cap 4","repository":null,"branch":null,"model":"anthropic/claude-sonnet-4-5","agent":"opencode","createdAt":"X","startedAt":null,"finishedAt":null,"result":null,"error":null,"exitCode":null,"filesChanged":[],"diffStat":null,"pullRequestUrl":null,"pullRequestStatus":null,"tokens":{"input":0,"output":0,"reasoning":0,"cacheRead":0,"cacheWrite":0},"cost":0.0,"meteredCostUsd":0.0,"maxCostUsd":1e-300,"timeoutSeconds":3600,"createPullRequest":false,"baseBranch":null,"prTitle":null,"draft":false,"image":null,"cancelRequested":false,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
{"runId":"RUNID","sessionId":"SES","status":"started","title":"cap 5","task":"cap 5","repository":null,"branch":null,"model":"anthropic/claude-sonnet-4-5","agent":"opencode","createdAt":null,"startedAt":null,"finishedAt":null,"result":null,"error":null,"exitCode":null,"filesChanged":[],"diffStat":null,"pullRequestUrl":null,"pullRequestStatus":null,"tokens":{"input":0,"output":0,"reasoning":0,"cacheRead":0,"cacheWrite":0},"cost":3.0,"meteredCostUsd":0.0,"maxCostUsd":0.30000000000000004,"timeoutSeconds":3600,"createPullRequest":false,"baseBranch":null,"prTitle":null,"draft":false,"image":null,"cancelRequested":false,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
{"runId":"RUNID","sessionId":"SES","status":"started","title":"cap 6","task":"cap 6","repository":null,"branch":null,"model":"anthropic/claude-sonnet-4-5","agent":"opencode","createdAt":"X","startedAt":null,"finishedAt":null,"result":null,"error":null,"exitCode":null,"filesChanged":[],"diffStat":null,"pullRequestUrl":null,"pullRequestStatus":null,"tokens":{"input":0,"output":0,"reasoning":0,"cacheRead":0,"cacheWrite":0},"cost":-0.0,"meteredCostUsd":0.0,"maxCostUsd":7.0,"timeoutSeconds":3600,"createPullRequest":false,"baseBranch":null,"prTitle":null,"draft":false,"image":null,"cancelRequested":false,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
{"runId":"RUNID","sessionId":"SES","status":"started","title":"cap 7","task":"cap 7","repository":null,"branch":null,"model":"anthropic/claude-sonnet-4-5","agent":"opencode","createdAt":"X","startedAt":null,"finishedAt":null,"result":null,"error":null,"exitCode":2,"filesChanged":[],"diffStat":null,"pullRequestUrl":null,"pullRequestStatus":null,"tokens":{"input":0,"output":0,"reasoning":0,"cacheRead":0,"cacheWrite":0},"cost":-7.0,"meteredCostUsd":0.0,"maxCostUsd":999999999999999.0,"timeoutSeconds":3600,"createPullRequest":false,"baseBranch":null,"prTitle":null,"draft":false,"image":null,"cancelRequested":false,"watchUrl":"http://HOST/ui/runs/RUNID?token=T"}
