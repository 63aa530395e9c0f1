#!/usr/bin/env perl
# Completion notifications (webhooks; issue 25, point 3), end to end: MCP
# through nginx (opencode_run_task's `notify`, sandbox_mcp_notify_allow at
# the MCP location), build/smcp-runner (delivery, retries, signature,
# `notify` events; --notify-secret-file, --notify-window), the egress's
# `location = /notify` that egress-routes.sh renders with SMCP_NOTIFY_ALLOW
# (the only way out), dockerd and the sandbox image with the real OpenCode;
# the model and GitHub are the fakes of t/lib/SMCP/Fakes.pm, the receivers
# SMCP::Receiver (t/lib/SMCP/Receiver.pm) on 127.0.0.1, listed in the
# allowlist by address; names resolve through a dnsmasq of this test (the
# egress's resolver, SMCP_RESOLVER).  Contract: docs/runner.md,
# "Completion notifications".
#
#   1. A receiver that answers 500 three times, then 204: delivered on the
#      4th attempt, the same X-SMCP-Delivery each time, the gaps growing
#      (~1 s, 2 s, 4 s); four `notify` events (retrying x3, delivered);
#      notify_status delivered, notify_attempts 4.
#   2. The signature, checked by the receiver: X-SMCP-Signature is
#      sha256=hex HMAC-SHA256(secret, X-SMCP-Timestamp . "." . raw body)
#      with the secret of --notify-secret-file; a tampered body or
#      timestamp does not verify.  Authorization and X-SMCP-Notify-To never
#      reach a receiver, nor any token but the watch link's (scope ui).
#   3. The json body: event, deliveryId, runId, sessionId, status, task
#      (its first line), title, diffStat, pullRequestUrl, finishedAt,
#      watchUrl; the watchUrl opens the run page (303, then 200).
#   4. slack: {"text": ...} with the status, the task's markup escaped
#      (<!channel> & <b>: &lt;!channel&gt; &amp; &lt;b&gt;) and
#      <watchUrl|Watch the run>.
#   5. ntfy: text/plain, the task's first line and the diffStat; Title,
#      Click (a watch URL that opens the run page), Tags, Priority.
#   6. A receiver that never answers: every attempt ends after ~10 s (the
#      runner's own timeout, status 0, or the egress's, 502), retried
#      until --notify-window (25 s here), then given up: notify_status
#      failed, the last event's result failed; the run itself stays
#      completed.  It runs alone, after the others.  While one of its
#      attempts hangs, another run's notification falls due and is
#      delivered within 3 s: a hanging receiver holds one of the runner's
#      notify senders, not the others.
#   7. Refused by opencode_run_task, nothing stored: a url outside every
#      prefix (the error names sandbox_mcp_notify_allow), malformed ones
#      (no scheme, ftp, user info, a CR LF, a space, no path, a ".."
#      segment, %2e), an unknown format, a url over 2048 bytes, notify not
#      an object.  A url whose prefix is listed by NAME but whose name
#      resolves to a private address (http://localhost:PORT/,
#      http://private.notify.test:PORT/ -> 127.0.0.1): the module takes
#      it (it checks prefixes only) and the egress refuses every delivery
#      with 403 saying why; the run's events say so, the receiver gets
#      nothing, and it is given up.
#   8. The egress's /notify: no token, a sandbox's token (scope egress),
#      a ui or mcp token, an expired notify token: 401; a notify token for
#      a destination not allowed, or for a listed name that resolves to a
#      private address: 403; a notify token for a listed address: through,
#      without Authorization and X-SMCP-Notify-To.
#   9. The events never hold the url's path (a Slack webhook's path is a
#      secret): `url` of every notify event is scheme://host:port/; the
#      runner's log and a watch link's view of the run do not hold it
#      either.
#   Also: a queued run cancelled by the module is notified (run.cancelled),
#   and a receiver that redirects (302) is not followed: not delivered,
#   nothing reaches the redirect's target; nginx's error log names an
#   attempt it cut by its upstream's scheme and address, never its path.
#
# Needs root, Docker, `make`, redis-server and dnsmasq; CI=true turns
# skips into failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(hmac_sha256_hex);
use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack;
use SMCP::Receiver;
use SMCP::Test qw(json_encode json_decode wait_until rhex which_bin require_prereqs);
use SMCP::UI;

my $dnsmasq = which_bin('dnsmasq');
require_prereqs('dnsmasq (apt-get install dnsmasq-base; .ci/install-deps)') unless $dnsmasq;

my $WINDOW = 25;     # --notify-window: seconds a notification is retried
my $SECRET = rhex(24);
my $SLACK_SECRET = 'XSLACKSECRET' . rhex(8);
my $HANG_SECRET = 'XHANGSECRET' . rhex(8);

# the receivers (one server, behaviour by path: SMCP::Receiver)
my $rcv = SMCP::Receiver->start(secret => $SECRET, fails => 3);
my $RP = $rcv->port;
my $R = "http://127.0.0.1:$RP";

# a port for dnsmasq (UDP and TCP free)
my $dport;
for (1 .. 20) {
    my $p = SMCP::Test::free_port('127.0.0.1');
    my $u = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $p, Proto => 'udp')
        or next;
    close $u;
    $dport = $p;
    last;
}
die "no free port for dnsmasq\n" unless $dport;

# listed by address; by name (names that resolve to 127.0.0.1)
my @ALLOW = ("$R/", "http://localhost:$RP/", "http://private.notify.test:$RP/");
my $ALLOW = join ' ', @ALLOW;

my $EDIT = sub {
    my ($f) = @_;
    return [ { tool_use => { name => 'write', input => {
                 filePath => "/workspace/repo/$f.txt", content => "notified\n" } } },
             { text => 'Edited.' } ];
};

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-JSON'  => $EDIT->('json'),
        'SCENARIO-SLACK' => $EDIT->('slack'),
        'SCENARIO-NTFY'  => $EDIT->('ntfy'),
        'SCENARIO-QUICK' => [ { text => 'Quick.' } ],
    },
    repos => { map { ("acme/$_" => { 'README.md' => "# $_\n" }) } qw(app slack ntfy) },
    location => "sandbox_mcp_notify_allow $ALLOW;",
    server => q{
        location /ui/ {
            sandbox_mcp_ui;
        }},
    egress_env => { SMCP_NOTIFY_ALLOW => $ALLOW, SMCP_RESOLVER => "127.0.0.1:$dport" },
);
my $t = $s->t;
my $dir = $t->dir;
my $ui = SMCP::UI->new($t);
my $VERSION = SMCP::Test::smcp_version();

# dnsmasq: the egress's resolver (names resolved while nginx runs)
my $hosts = "$dir/hosts";
SMCP::Test::spew($hosts, "127.0.0.1 localhost\n127.0.0.1 private.notify.test\n");
my $dlog = "$dir/dnsmasq.log";
$t->spawn('dnsmasq', "$dir/dnsmasq.out", $dnsmasq, '--keep-in-foreground',
    '--conf-file=/dev/null', '--no-resolv', '--no-hosts', "--addn-hosts=$hosts",
    '--listen-address=127.0.0.1', '--bind-interfaces', "--port=$dport",
    '--local-ttl=1', '--user=' . getpwuid($>), '--pid-file=', "--log-facility=$dlog",
    '--log-queries');
ok(wait_until(30, sub { ($t->read_file($dlog) // '') =~ /read \Q$hosts\E/ }),
   "dnsmasq on 127.0.0.1:$dport")
    or diag($t->read_file("$dir/dnsmasq.out"));

# the routes as rendered: the /notify location, with the allowlist
my $routes = $t->read_file("$dir/routes.conf");
like($routes, qr/location = \/notify \{[^}]*sandbox_mcp_egress_notify on;/s,
     'egress-routes.sh with SMCP_NOTIFY_ALLOW renders location = /notify')
    or diag($routes);
like($routes, qr/sandbox_mcp_notify_allow\s+\Q$ALLOW\E;/, '... with the allowlist');

my $secret_file = "$dir/notify-secret";
SMCP::Test::spew($secret_file, "$SECRET\nnot the secret\n");
chmod 0600, $secret_file;

##############################################################################
# helpers

my $P = 'smcp:';

sub text_of { SMCP::Test::result_text($_[0]) // '' }

sub run_ids {
    return sort grep { /^\Q${P}\Erun:run_[0-9a-f]+$/ } @{ $t->redis('KEYS', "${P}run:run_*") || [] };
}

sub notify_events {
    my ($id) = @_;
    return map { $_->{json} // {} }
           grep { ($_->{type} // '') eq 'notify'
                  || (ref $_->{json} eq 'HASH' && ($_->{json}{type} // '') eq 'notify') }
           $s->stored_events($id);
}

# the receiver's requests on a path (a string: exact; qr: matched)
sub got { my @r = $rcv->requests(path => $_[0]); return @r }

# how many the receiver got there
sub ngot { my @r = got($_[0]); return scalar @r }

# wait until the run hash says the notification's last word
sub wait_notified {
    my ($id, $timeout) = @_;
    my $st;
    wait_until($timeout, sub { $st = $s->run_hash($id)->{notify_status} }, 0.25);
    return $st // '';
}

# a watch URL followed on nginx: (303's status, Location, the page's
# status, its body)
sub follow_watch {
    my ($url, $id) = @_;
    my ($path) = ($url // '') =~ m{^http://127\.0\.0\.1:\d+(/ui/runs/\Q$id\E\?token=[\w.-]+)$}
        or return (0);
    my $r = $t->http(path => $path);
    my ($tok) = $path =~ /token=([\w.-]+)/;
    my ($cookie) = ($r->{headers}{'set-cookie'} // '') =~ /^(smcp_ui_run=[\w.-]+);/;
    my $page = $t->http(path => "/ui/runs/$id", headers => [Cookie => $cookie // '']);
    my $data = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => $cookie // '']);
    return ($r->{status}, $r->{headers}{location}, $page->{status}, $page->{body}, $data);
}

# the checks every delivered request passes: signed (the receiver's own
# check and ours on the raw bytes), the headers of the contract, no token
sub request_common {
    my ($req, $what, %o) = @_;
    my $h = $req->{headers};
    my $raw = SMCP::Receiver::raw($req);
    is($req->{method}, 'POST', "$what: POST");
    is($req->{sig}, 'ok', "$what: the receiver verified the signature");
    like($h->{'x-smcp-signature'} // '', qr/^sha256=[0-9a-f]{64}$/, "$what: X-SMCP-Signature sha256=hex");
    like($h->{'x-smcp-timestamp'} // '', qr/^\d{10}$/, "$what: X-SMCP-Timestamp unix seconds");
    ok(abs(($h->{'x-smcp-timestamp'} // 0) - $req->{time}) <= 5,
       "$what: ... the attempt's time") or diag("ts $h->{'x-smcp-timestamp'} got $req->{time}");
    is($h->{'x-smcp-signature'},
       'sha256=' . hmac_sha256_hex(($h->{'x-smcp-timestamp'} // '') . ".$raw", $SECRET),
       "$what: HMAC-SHA256(secret, timestamp.body)");
    my $tampered = $raw;
    substr($tampered, length($tampered) > 2 ? 1 : 0, 1) ^= 'A';
    ok(!SMCP::Receiver::verify($SECRET, $h->{'x-smcp-timestamp'}, $tampered,
                               $h->{'x-smcp-signature'}),
       "$what: a tampered body does not verify");
    ok(!SMCP::Receiver::verify($SECRET, ($h->{'x-smcp-timestamp'} // 0) + 1, $raw,
                               $h->{'x-smcp-signature'}),
       "$what: ... nor another timestamp");
    ok(!SMCP::Receiver::verify('another secret of 16+ bytes', $h->{'x-smcp-timestamp'},
                               $raw, $h->{'x-smcp-signature'}),
       "$what: ... nor another secret");
    ok(!exists $h->{authorization}, "$what: no Authorization reaches the receiver");
    ok(!exists $h->{'x-smcp-notify-to'}, "$what: no X-SMCP-Notify-To");
    ok(!grep({ exists $h->{$_} } qw(x-api-key api-key cookie proxy-authorization)),
       "$what: no other credential header");
    is($h->{'user-agent'}, "smcp-runner/$VERSION", "$what: User-Agent smcp-runner/<version>");
    is($h->{'x-smcp-event'}, $o{event} // 'run.completed', "$what: X-SMCP-Event");
    like($h->{'x-smcp-delivery'} // '', qr/^[0-9a-f]{32}$/, "$what: X-SMCP-Delivery, 32 hex");
    # every JWT anywhere in the request is the watch link's (scope ui)
    my $all = join "\n", $raw, map { "$_->[0]: $_->[1]" } @{ $req->{header_list} || [] };
    my @jwts = $all =~ /\b(eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+)/g;
    my @bad = grep { my (undef, $c) = SMCP::Test::decode_jwt($_); !ref $c || ($c->{scope} // '') ne 'ui' } @jwts;
    is_deeply(\@bad, [], "$what: no token but the watch link's (scope ui)");
    unlike($all, qr/\Q$SECRET\E/, "$what: the secret itself is not sent");
}

# a watch URL: the run's page with a ui token for the run, living
# notify_ttl (the location's ui token ttl)
sub watch_ok {
    my ($url, $id, $what) = @_;
    my $base = $s->run_hash($id)->{watch_base} // '(none)';
    like($url // '', qr/^\Q$base\E\?token=[\w.-]+$/, "$what: watch_base?token=...");
    my ($tok) = ($url // '') =~ /token=([\w.-]+)/;
    my (undef, $c) = SMCP::Test::decode_jwt($tok // '');
    $c = {} unless ref $c eq 'HASH';
    is($c->{scope}, 'ui', "$what: its token's scope ui");
    is($c->{run}, $id, "$what: ... for the run");
    is($c->{sub}, $t->tenant, "$what: ... the tenant's");
    like($c->{jti} // '', qr/^[0-9a-f]{32}$/, "$what: ... a jti (revocable)");
    my $ttl = $s->run_hash($id)->{notify_ttl} // 0;
    ok($ttl > 0 && abs(($c->{exp} // 0) - ($c->{iat} // 0) - $ttl) <= 5,
       "$what: ... living notify_ttl ($ttl s)") or diag(json_encode($c));
    my ($st, $loc, $pst, $pbody) = follow_watch($url, $id);
    is($st, 303, "$what: GET it: 303 (the cookie set)");
    like($loc // '', qr{/ui/runs/\Q$id\E$}, "$what: ... to the run page");
    is($pst, 200, "$what: the run page: 200");
    is($pbody, $ui->file('run.html'), "$what: ... the run page itself");
}

##############################################################################
# 7. refused at opencode_run_task (before any runner: nothing would take a
# run stored by mistake)

my $LONG = "$R/" . ('a' x (2049 - length("$R/")));
subtest 'refused by opencode_run_task, nothing stored' => sub {
    my @before = run_ids();
    my $n = @before;
    my %cases = (
        'outside every prefix'  => [ { url => 'https://hooks.evil.example/x' },
                                     qr/sandbox_mcp_notify_allow/ ],
        'another port'          => [ { url => 'http://127.0.0.1:' . ($RP == 65535 ? 1 : $RP + 1) . '/' },
                                     qr/sandbox_mcp_notify_allow/ ],
        'a longer host'         => [ { url => "http://127.0.0.1:${RP}0/" }, qr/notify/ ],
        'user info'             => [ { url => "http://127.0.0.1:$RP\@hooks.evil.example/" },
                                     qr/notify/ ],
        'no scheme'             => [ { url => "127.0.0.1:$RP/x" }, qr/notify/ ],
        'ftp'                   => [ { url => "ftp://127.0.0.1:$RP/x" }, qr/notify/ ],
        'CR LF'                 => [ { url => "$R/x\r\nX-Evil: 1" }, qr/notify/ ],
        'a space'               => [ { url => "$R/x y" }, qr/notify/ ],
        'no path'               => [ { url => $R }, qr/notify/ ],
        'a .. segment'          => [ { url => "$R/a/../b" }, qr/notify/ ],
        'an escaped dot'        => [ { url => "$R/a/%2e%2e/b" }, qr/notify/ ],
        'empty'                 => [ { url => '' }, qr/notify/ ],
        'no url'                => [ { format => 'json' }, qr/notify|url/ ],
        'over 2048 bytes'       => [ { url => $LONG }, qr/notify/ ],
        'an unknown format'     => [ { url => "$R/x", format => 'xml' }, qr/format/ ],
        'a format not a string' => [ { url => "$R/x", format => 1 }, qr/format/ ],
        'not an object'         => [ "$R/x", qr/notify/ ],
    );
    is(length($LONG), 2049, 'the long url: 2049 bytes');
    for my $name (sort keys %cases) {
        my ($notify, $re) = @{ $cases{$name} };
        my $res = $s->call('opencode_run_task', { task => "SCENARIO-QUICK: $name",
                                                  notify => $notify });
        my $msg = text_of($res) . ($res->{error}{message} // '');
        ok($res->{isError} || $res->{error}, "$name: refused")
            or diag(json_encode($res));
        like($msg, $re, "$name: saying why ($msg)");
        unlike($msg, qr/\r|\n/, "$name: in one line") if $name eq 'CR LF';
    }
    is_deeply([run_ids()], \@before, 'no run stored');

    # 2048 bytes: taken (the bound is inclusive); cancelled at once below
    my $ok = $s->call('opencode_run_task', { task => 'SCENARIO-QUICK: 2048',
                                             notify => { url => substr($LONG, 0, 2048) } });
    ok(!$ok->{isError} && SMCP::Test::sc($ok)->{runId}, 'a url of 2048 bytes: taken')
        or diag(text_of($ok));
    if (my $id = (SMCP::Test::sc($ok) || {})->{runId}) {
        $s->call('opencode_cancel_run', { runId => $id });
        is($s->run_hash($id)->{notify_url}, substr($LONG, 0, 2048), '... stored whole');
        is($s->run_hash($id)->{notify_format}, 'json', '... format json by default');
    }
};

##############################################################################
# the runs: four that complete (each on its sandbox), three queued runs
# cancelled before any runner (their notifications need no sandbox)

my $t0 = time();
my $json = $s->run_task(task => "SCENARIO-JSON: notify me as json\nthe second line, not sent",
                        title => 'Notify JSON', repository => 'https://github.com/acme/app',
                        createPullRequest => JSON::PP::true,
                        notify => { url => "$R/flaky/json-1" });
my $slack = $s->run_task(task => "SCENARIO-SLACK: <!channel> & <b>bold</b> > done\nsecond",
                         repository => 'https://github.com/acme/slack',
                         notify => { url => "$R/services/T0001/B0002/$SLACK_SECRET",
                                     format => 'slack' });
my $ntfy = $s->run_task(task => "SCENARIO-NTFY: ntfy me\nsecond",
                        repository => 'https://github.com/acme/ntfy',
                        notify => { url => "$R/ntfy-topic", format => 'ntfy' });

my %cancelled;
for my $c (['cancel', "$R/cancelled/1"], ['redirect', "$R/redirect/1"],
           ['localhost', "http://localhost:$RP/private/localhost"],
           ['name', "http://private.notify.test:$RP/private/name"]) {
    my ($k, $url) = @$c;
    my $res = $s->call('opencode_run_task', { task => "SCENARIO-QUICK: $k",
                                              notify => { url => $url } });
    my $sc = SMCP::Test::sc($res);
    ok($sc && $sc->{runId}, "$k: opencode_run_task takes $url")
        or diag(text_of($res));
    next unless $sc && $sc->{runId};
    my $cr = $s->call('opencode_cancel_run', { runId => $sc->{runId} });
    is($s->result($sc->{runId})->{status}, 'cancelled', "$k: cancelled while queued");
    $cancelled{$k} = $sc->{runId};
}

my $runner = $s->start_runner(concurrency => 4,
    args => ['--notify-secret-file', $secret_file, '--notify-window', $WINDOW]);

##############################################################################
# 8. the egress's /notify, straight (no runner involved)

my ($gw, $eport) = ($s->gateway, $s->egress_port);

sub egress_notify {
    my (%o) = @_;
    my $sock = IO::Socket::INET->new(PeerAddr => $gw, PeerPort => $eport,
                                     Proto => 'tcp', Timeout => 5);
    return { status => 0, error => "connect $gw:$eport: $!" } unless $sock;
    my $body = $o{body} // '{"event":"run.completed"}';
    return $t->http(sock => $sock, port => $eport, host => "$gw:$eport", method => 'POST',
                    path => '/notify', body => $body, timeout => 20,
                    headers => [ 'Content-Type' => 'application/json',
                                 (defined $o{token} ? (Authorization => "Bearer $o{token}") : ()),
                                 (defined $o{to} ? ('X-SMCP-Notify-To' => $o{to}) : ()),
                                 @{ $o{headers} || [] } ]);
}

subtest "the egress's /notify: tokens and destinations" => sub {
    my ($run) = $t->live_run(status => 'completed', notify_url => "$R/direct/1");
    my $now = SMCP::Test::time_int();
    my $notify = $t->token(scope => 'notify', run => $run, exp => $now + 60);
    my $sandbox = $t->token(scope => 'egress', run => $run, exp => $now + 900);

    my $r = egress_notify(token => $notify, to => "$R/direct/1",
                          headers => ['X-SMCP-Delivery' => 'd' x 32]);
    is($r->{status}, 204, 'a notify token, a listed address: the receiver\'s 204 comes back')
        or diag("$r->{status} $r->{body}");
    my ($got) = got('/direct/1');
    ok($got, '... the receiver got it');
    ok($got && !exists $got->{headers}{authorization}, '... without Authorization');
    ok($got && !exists $got->{headers}{'x-smcp-notify-to'}, '... without X-SMCP-Notify-To');
    is($got && $got->{headers}{'x-smcp-delivery'}, 'd' x 32, '... the other headers as sent');
    is($got && SMCP::Receiver::raw($got), '{"event":"run.completed"}', '... the body as sent');
    is($got && $got->{headers}{host}, "127.0.0.1:$RP", '... Host: the url\'s');

    my %refused = (
        'no token'                => [ undef, "$R/x", 401 ],
        'a sandbox\'s token (scope egress)' => [ $sandbox, "$R/x", 401 ],
        'a ui token'              => [ $t->token(scope => 'ui', run => $run), "$R/x", 401 ],
        'an mcp token'            => [ $t->token(), "$R/x", 401 ],
        'an expired notify token' => [ $t->token(scope => 'notify', run => $run,
                                                 exp => $now - 10, iat => $now - 100),
                                       "$R/x", 401 ],
        'a notify token signed with another secret' => [
            $t->token(scope => 'notify', run => $run, secret => rhex(32)), "$R/x", 401 ],
        'a notify token, a destination not allowed' => [ $notify, 'https://hooks.evil.example/x', 403 ],
        'a notify token, another port' => [ $notify, 'http://127.0.0.1:1/x', 403 ],
        'a notify token, localhost listed by name' => [ $notify, "http://localhost:$RP/x", 403 ],
        'a notify token, a listed name resolving to 127.0.0.1' =>
            [ $notify, "http://private.notify.test:$RP/x", 403 ],
        'a notify token, a .. segment' => [ $notify, "$R/a/../x", 403 ],
    );
    for my $name (sort keys %refused) {
        my ($tok, $to, $want) = @{ $refused{$name} };
        my $r = egress_notify(token => $tok, to => $to);
        is($r->{status}, $want, "$name: $want") or diag($r->{body});
        my $j = json_decode($r->{body} // '') || {};
        my $msg = ref $j->{error} eq 'HASH' ? $j->{error}{message} : $j->{error};
        ok(defined $msg && length $msg, "$name: a JSON error") or diag($r->{body});
        like($msg // "", qr/private address/, "$name: saying why (" . ($msg // "") . ")")
            if $to =~ /localhost|private\.notify/;
    }
    my $r2 = egress_notify(token => $notify);
    is($r2->{status}, 400, 'no X-SMCP-Notify-To: 400');
    $r2 = egress_notify(token => $notify, to => "$R/x", headers => ['X-SMCP-Notify-To' => "$R/y"]);
    is($r2->{status}, 400, 'two X-SMCP-Notify-To: 400');
    is(scalar(@{ $rcv->requests(path => qr{^/(x|y)$|^/a/}) }), 0,
       'the receiver got none of the refused ones');
};

##############################################################################
# the completed runs

sub done_ok {
    my ($run, $what) = @_;
    my $r = $s->wait_done($run->{runId}, 300);
    is($r->{status}, 'completed', "$what: the run completed")
        or $s->diag_run($run->{runId}, $runner);
    return $r;
}

subtest '1, 2, 3: json; 500 three times then 204: the 4th attempt delivers' => sub {
    my $id = $json->{runId};
    my $res = done_ok($json, 'json');
    is(wait_notified($id, 60), 'delivered', 'notify_status delivered')
        or $s->diag_run($id, $runner);
    my $h = $s->run_hash($id);
    is($h->{notify_attempts}, 4, 'notify_attempts 4');
    like($h->{notify_delivery} // '', qr/^[0-9a-f]{32}$/, 'notify_delivery: 32 hex');
    like($h->{notify_first} // '', qr/^\d{13}$/, 'notify_first: ms');

    my @req = got('/flaky/json-1');
    is(scalar @req, 4, 'the receiver got 4 requests');
    is_deeply([map { $_->{status} } @req], [500, 500, 500, 204], '... 500, 500, 500, 204');
    is_deeply([map { $_->{headers}{'x-smcp-delivery'} // '' } @req],
              [($h->{notify_delivery} // '?') x 4], '... all with the one X-SMCP-Delivery');
    my @gap = map { $req[$_]{time} - $req[$_ - 1]{time} } 1 .. $#req;
    note(sprintf('gaps: %s s', join(', ', map { sprintf '%.2f', $_ } @gap)));
    if (@gap == 3) {
        ok($gap[0] >= 0.9 && $gap[0] < 2.2, sprintf('backoff: ~1 s (%.2f)', $gap[0]));
        ok($gap[1] >= 1.9 && $gap[1] < 3.2, sprintf('backoff: ~2 s (%.2f)', $gap[1]));
        ok($gap[2] >= 3.9 && $gap[2] < 5.5, sprintf('backoff: ~4 s (%.2f)', $gap[2]));
        ok($gap[0] < $gap[1] && $gap[1] < $gap[2], '... growing');
    } else {
        fail('backoff: three gaps');
    }
    ok(abs($req[0]{time} * 1000 - ($h->{notify_first} // 0)) < 2000,
       'the first attempt at notify_first');
    ok($req[0]{time} * 1000 >= ($h->{finished_at} // 9e99) - 1000,
       '... once the run had finished');

    my @ev = notify_events($id);
    is(scalar @ev, 4, 'four notify events') or diag(json_encode(\@ev));
    is_deeply([map { $_->{attempt} } @ev], [1, 2, 3, 4], '... attempts 1 to 4');
    is_deeply([map { $_->{result} // '' } @ev], [qw(retrying retrying retrying delivered)],
              '... retrying x3, delivered');
    is_deeply([map { $_->{status} } @ev], [500, 500, 500, 204], '... the statuses');
    is_deeply([map { $_->{deliveryId} // '' } @ev], [($h->{notify_delivery} // '?') x 4],
              '... the delivery id');
    ok(!grep({ !defined $_->{next} } @ev[0 .. 2]), '... the retries say when the next is');
    ok(!defined $ev[3]{next}, '... the delivered one does not');
    ok(!grep({ !defined $_->{error} || !length $_->{error} } @ev[0 .. 2]),
       '... the retries say why') or diag(json_encode(\@ev));
    for my $i (0 .. 2) {
        my $next = $ev[$i]{next} // 0;
        ok(abs($next / 1000 - $req[$i + 1]{time}) < 1.5,
           "... event ${i}'s next: when attempt " . ($i + 2) . ' came');
    }
    is($s->run_hash($id)->{status}, 'completed', 'the run stays completed');

    # 2: the signature, the headers, no token
    for my $i (0 .. $#req) {
        request_common($req[$i], 'attempt ' . ($i + 1));
    }
    my @ts = map { $_->{headers}{'x-smcp-timestamp'} // 0 } @req;
    ok($ts[3] - $ts[0] >= 5, 'each attempt its own timestamp (signed anew)');

    # 3: the json body
    my $last = $req[-1];
    like($last->{headers}{'content-type'} // '', qr{^application/json}, 'json: application/json');
    my $b = json_decode(SMCP::Receiver::raw($last));
    is(ref $b, 'HASH', 'json: a JSON object') or return;
    is($b->{event}, 'run.completed', 'event run.completed');
    is($b->{deliveryId}, $h->{notify_delivery}, 'deliveryId: notify_delivery');
    is($b->{runId}, $id, 'runId');
    is($b->{sessionId}, $json->{sessionId}, 'sessionId');
    is($b->{status}, 'completed', 'status completed');
    is($b->{task}, 'SCENARIO-JSON: notify me as json', 'task: its first line only');
    is($b->{title}, 'Notify JSON', 'title');
    is($b->{diffStat}, $res->{diffStat}, "diffStat: get_result's ($res->{diffStat})");
    ok(defined $res->{diffStat} && length $res->{diffStat}, '... which there is');
    is($b->{pullRequestUrl}, 'https://github.com/acme/app/pull/1', 'pullRequestUrl');
    ok(!exists $b->{error}, 'no error');
    is($b->{finishedAt}, $h->{finished_at}, 'finishedAt: the run\'s finished_at (ms)');
    like(SMCP::Receiver::raw($last), qr/"finishedAt":\d+[,}]/, '... a JSON number');
    watch_ok($b->{watchUrl}, $id, 'watchUrl');
    $s->timing('json run, delivered on the 4th attempt', time() - $t0);
};

subtest '4: slack' => sub {
    my $id = $slack->{runId};
    my $res = done_ok($slack, 'slack');
    is(wait_notified($id, 30), 'delivered', 'notify_status delivered')
        or $s->diag_run($id, $runner);
    my @req = got("/services/T0001/B0002/$SLACK_SECRET");
    is(scalar @req, 1, 'one request') or return;
    request_common($req[0], 'slack');
    like($req[0]{headers}{'content-type'} // '', qr{^application/json}, 'application/json');
    my $b = json_decode(SMCP::Receiver::raw($req[0])) || {};
    is_deeply([sort keys %$b], ['text'], '{"text": ...}');
    my $text = $b->{text} // '';
    note($text);
    like($text, qr/^\*Run completed\*: /, 'the status, in bold');
    like($text, qr/^\*Run completed\*: SCENARIO-SLACK: &lt;!channel&gt; &amp; &lt;b&gt;bold&lt;\/b&gt; &gt; done$/m,
         'the task\'s first line, its markup escaped');
    unlike($text, qr/<!channel>|<b>/, 'no live markup');
    unlike($text, qr/second/, 'not the second line');
    like($text, qr/^\Q$res->{diffStat}\E$/m, 'the diffStat') if $res->{diffStat};
    my ($watch) = $text =~ /<([^<>|]+)\|Watch the run>/;
    ok($watch, '<watchUrl|Watch the run>');
    watch_ok($watch, $id, 'slack watch link');
};

subtest '5: ntfy' => sub {
    my $id = $ntfy->{runId};
    my $res = done_ok($ntfy, 'ntfy');
    is(wait_notified($id, 30), 'delivered', 'notify_status delivered')
        or $s->diag_run($id, $runner);
    my @req = got('/ntfy-topic');
    is(scalar @req, 1, 'one request') or return;
    my $h = $req[0]{headers};
    request_common($req[0], 'ntfy');
    is($h->{'content-type'}, 'text/plain; charset=utf-8', 'text/plain; charset=utf-8');
    my $body = SMCP::Receiver::raw($req[0]);
    my @lines = split /\n/, $body;
    is($lines[0], 'SCENARIO-NTFY: ntfy me', 'body: the task\'s first line');
    is($lines[1], $res->{diffStat}, 'body: the diffStat');
    unlike($body, qr/second/, 'not the second line');
    is($h->{title}, 'Run completed', 'Title: Run completed');
    is($h->{tags}, 'white_check_mark', 'Tags: white_check_mark');
    is($h->{priority}, 'default', 'Priority: default');
    watch_ok($h->{click}, $id, 'Click');
};

subtest 'a queued run cancelled: run.cancelled' => sub {
    my $id = $cancelled{cancel} or return fail('no cancelled run');
    is(wait_notified($id, 30), 'delivered', 'notify_status delivered')
        or $s->diag_run($id, $runner);
    my @req = got('/cancelled/1');
    is(scalar @req, 1, 'one request') or return;
    request_common($req[0], 'cancelled', event => 'run.cancelled');
    my $b = json_decode(SMCP::Receiver::raw($req[0])) || {};
    is($b->{event}, 'run.cancelled', 'event run.cancelled');
    is($b->{status}, 'cancelled', 'status cancelled');
    is($b->{task}, 'SCENARIO-QUICK: cancel', 'task');
};

##############################################################################
# 6, 7 (at delivery), the redirect: given up after the window

subtest '7: a listed name resolving to a private address: refused at each delivery' => sub {
    for my $k (qw(localhost name)) {
        my $id = $cancelled{$k} or next;
        is(wait_notified($id, $WINDOW + 40), 'failed', "$k: notify_status failed")
            or $s->diag_run($id, $runner);
        my @ev = notify_events($id);
        ok(@ev >= 2, "$k: " . scalar(@ev) . ' attempts, each refused');
        ok(!grep({ ($_->{status} // 0) != 403 } @ev), "$k: each the egress's 403")
            or diag(json_encode(\@ev));
        like($ev[0]{error} // '', qr/private address/, "$k: the event says why")
            or diag($ev[0]{error});
        is($ev[-1]{result}, 'failed', "$k: the last: failed");
    }
    is(ngot(qr{^/private/}), 0, 'the receiver got nothing');
};

subtest 'a 302 is not followed' => sub {
    my $id = $cancelled{redirect} or return fail('no run');
    is(wait_notified($id, $WINDOW + 40), 'failed', 'notify_status failed: a 302 is no delivery')
        or $s->diag_run($id, $runner);
    my @ev = notify_events($id);
    ok(@ev >= 2 && !grep({ ($_->{status} // 0) != 302 } @ev), 'each attempt: 302')
        or diag(json_encode(\@ev));
    is(ngot('/landed'), 0, 'nothing reached the redirect\'s target');
};

##############################################################################
# 6. the receiver that never answers, alone (it holds one of the runner's
# notify senders for each attempt: the backoff of the others above is
# timed, and one sender fewer would stretch it)

my $hang = $s->run_task(task => 'SCENARIO-QUICK: a receiver that never answers',
                        notify => { url => "$R/hang/$HANG_SECRET" });

# while an attempt hangs, another run's notification falls due: another
# sender takes it at once (RUNNER_NOTIFY_SENDERS)
subtest 'while a receiver hangs, another notification goes' => sub {
    ok($rcv->wait_requests(1, path => "/hang/$HANG_SECRET", timeout => 300),
       'the hanging attempt began') or return;
    sleep(0.5);
    my ($id) = $t->live_run(status => 'completed', task => 'during the hang',
                            notify_url => "$R/during/1", notify_format => 'json',
                            notify_ttl => 3600, finished_at => SMCP::Test::now_ms(),
                            watch_base => "http://127.0.0.1:${\ $t->port}/ui/runs/x");
    my $due = time();
    $t->redis('ZADD', "${P}notify", 'NX', int($due * 1000), $id);
    ok($rcv->wait_requests(1, path => '/during/1', timeout => 30), 'delivered');
    my ($r) = got('/during/1');
    my $wait = ($r ? $r->{time} : time()) - $due;
    note(sprintf('a notification due while another hangs waited %.1f s', $wait));
    ok($wait < 3, sprintf('... not held up by the hanging receiver (%.1f s)', $wait));
};

subtest '6: a receiver that never answers: retried for the window, given up' => sub {
    my $id = $hang->{runId};
    done_ok($hang, 'hang');
    is(wait_notified($id, $WINDOW + 60), 'failed', 'notify_status failed (given up)')
        or $s->diag_run($id, $runner);
    my $h = $s->run_hash($id);
    is($h->{status}, 'completed', 'the run itself stays completed');
    my @req = got("/hang/$HANG_SECRET");
    my @ev = notify_events($id);
    note(json_encode(\@ev));
    ok(@req >= 2, scalar(@req) . ' attempts reached the receiver');
    is(scalar @ev, scalar @req, 'an event per attempt');
    is($h->{notify_attempts}, scalar @req, 'notify_attempts');
    is_deeply([map { $_->{result} // '' } @ev],
              [('retrying') x (@ev - 1), 'failed'], 'retrying ..., then failed');
    ok(!defined $ev[-1]{next}, '... the last without a next');
    # 0: the runner's own 10 s ran out; 502 (504 in the contract): the
    # egress's proxy_read_timeout (10 s) came first
    ok(!grep({ my $x = $_->{status} // -1; $x != 0 && $x != 502 && $x != 504 } @ev),
       'statuses 0, 502 or 504 (timeouts)') or diag(json_encode(\@ev));
    like($ev[0]{error} // '', qr/time|no answer/i, 'the error says it timed out')
        or diag($ev[0]{error});
    my @closed;
    wait_until(10, sub { @closed = $rcv->closed_at("/hang/$HANG_SECRET"); @closed >= @req });
    is(scalar @closed, scalar @req, 'every connection closed by the sender');
    for my $i (0 .. $#req) {
        my $d = ($closed[$i] // 0) - $req[$i]{time};
        ok($d > 8.5 && $d < 13, sprintf('attempt %d ended after ~10 s (%.1f)', $i + 1, $d));
    }
    my $first = ($h->{notify_first} // 0) / 1000;
    ok($req[-1]{time} - $first < $WINDOW, 'the last attempt began within the window');
    ok(($closed[-1] // 0) - $first >= $WINDOW, 'given up once the window had passed');
    ok(($closed[-1] // 0) - $first < $WINDOW + 15, '... not much later');
};

##############################################################################
# 9. no url path in the events, nor in the runner's log, nor to a watch link

subtest '9: the url\'s path is kept out of the events' => sub {
    my @ids = ((map { $_->{runId} } $json, $slack, $ntfy, $hang), values %cancelled);
    my $n = 0;
    for my $id (@ids) {
        for my $e (notify_events($id)) {
            $n++;
            my $want = ($e->{url} // '') =~ m{^http://(localhost|private\.notify\.test):}
                ? "http://$1:$RP/" : "$R/";
            is($e->{url}, $want, "$id attempt $e->{attempt}: url $want");
        }
        my $all = join "\n", map { $_->{data} // '' } $s->stored_events($id);
        unlike($all, qr/\Q$SLACK_SECRET\E|\Q$HANG_SECRET\E|\/flaky\/|\/services\/|ntfy-topic|\/private\//,
               "$id: no path in any event");
    }
    ok($n >= 10, "$n notify events seen");
    my $log = $s->runner_log($runner);
    unlike($log, qr/\Q$SLACK_SECRET\E/, 'the runner\'s log: no Slack path');
    unlike($log, qr/\Q$HANG_SECRET\E/, '... nor another url\'s path');
    unlike($log, qr/eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+/, '... nor a token');
    {
        # nginx's error log names the upstream of an attempt it cut (the
        # hanging receiver's timeouts) by its scheme and address only
        # (whichever 10 s runs out first: the egress's read timeout logs
        # "upstream timed out", the runner's ends the request first)
        my $elog = $t->read_file("$dir/error.log") // '';
        my @up = grep { /\bupstream: "/ && /\/notify / } split /\n/, $elog;
        note(scalar(@up) . ' lines of the error log name a notification\'s upstream');
        my @bad = grep { !m{upstream: "https?://[^/"]+/\.\.\."} } @up;
        ok(!@bad, 'the egress\'s error log names a notification\'s upstream by address')
            or diag($bad[0]);
        unlike($elog, qr/\Q$HANG_SECRET\E/, '... and never its url\'s path')
            or diag((grep { /\Q$HANG_SECRET\E/ } split /\n/, $elog)[0]);
    }

    # what a watch link shows of the run
    my $id = $slack->{runId};
    my $sc = SMCP::Test::sc($s->call('opencode_get_result', { runId => $id })) || {};
    my (undef, undef, undef, undef, $data) = follow_watch($sc->{watchUrl}, $id);
    is($data && $data->{status}, 200, 'a watch link\'s data: 200');
    unlike($data && $data->{body} // '', qr/\Q$SLACK_SECRET\E/, '... without the notify url');
};

$s->done;
