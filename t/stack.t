#!/usr/bin/env perl
# `make up` / `make down` and the token CLI: the README's quick start.
#
# Starts the local stack in a temp state dir on free ports, mints a token
# with `make token`, drives the printed MCP URL with it, then `make down`
# stops exactly the processes `make up` started.  Also: the egress proxy
# is an nginx instance of its own and the only one holding provider keys;
# the runner is supervised (a killed runner comes back, the crash logged);
# nginx workers are not root, nothing in the state dir is readable by
# others, Redis runs with its memory cap.  The package registries of
# SMCP_REGISTRIES=npm,pypi (upstreams NPM_REGISTRY_URL, PYPI_INDEX_URL,
# PYPI_FILES_URL at loopback stand-ins) are served through the printed
# egress listener: metadata rewritten to the egress, the second GET a cache
# hit, a registry not enabled 403, a PUT 405.  SMCP_OAUTH=on serves the
# OAuth sign-in, registrations limited per client address.  Its summary:
# the version, every value in one column, the MCP URL and the dashboard
# link at SMCP_PUBLIC_URL when set, and a `claude mcp add` line with that
# URL and the printed token.  The warm pool is on by default (`Runner:
# ..., warm pool 1`): a run takes the pooled sandbox, and a message sent
# with opencode_send_message while its agent works reaches the model's
# next request; the session's follow-up, started from the dashboard,
# takes the sandbox held for it
# (`sessions held 120 s`), warm; make down leaves no pooled or held
# sandbox behind.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);
use SMCP::Docker qw(docker_available);
use SMCP::MakeUp;
use SMCP::Receiver;
use SMCP::Stack qw(bash_step);

my $root = repo_root();

require_prereqs('build/smcp-token and the module (run `make`)')
    unless -x "$root/build/smcp-token" && -f module_path();

# the egress side (its own sandbox network, a fake model, a fake GitHub,
# the package registries' stand-ins) when there is a Docker engine
my $egress = (docker_available() || is_ci()) ? 1 : 0;
diag('no dockerd: make up without the egress side') unless $egress;
# (SMCP_BACKEND=swarm make up: t/runner_swarm.t)
my $MARK = 'STEER-' . int(rand(1e9));
my $up = SMCP::MakeUp->new(egress => $egress, registries => 1, scripts => {
    'SCENARIO-HELLO' => [ { text => 'stack run done' } ],
    # the step the message arrives in: a command that takes 8 s
    'SCENARIO-STEER' => [ bash_step('sleep 8; echo slept', 'Wait'),
                          { text => 'Steered and done.' } ],
});
my ($state, $port, $rport, $mport, $emport, $envdir)
    = map { $up->$_ } qw(state port rport mport emport envdir);
my ($fake, $gh, $eport, $net, $npm, $pypi, $pyfiles)
    = map { $up->$_ } qw(fake gh eport net npm pypi pyfiles);
# the OAuth locations of SMCP_OAUTH=on (their rate limit per address)
$ENV{SMCP_OAUTH} = 'on';
# completion notifications (SMCP_NOTIFY_ALLOW) to a receiver of the test's
my $rcv = SMCP::Receiver->start;
$ENV{SMCP_NOTIFY_ALLOW} = $rcv->url . '/hooks/';

# `make up` also runs `make up-check deps-run all`; .ci/stack is what it
# calls after that
my ($rc0, $out) = $up->up;
is($rc0, 0, 'stack up exits 0') or diag($out);

my ($url) = $out =~ m{^  MCP URL:\s+(\S+)}m;
my ($token) = $out =~ m{^  Token:\s+(\S+)}m;
is($url, "http://127.0.0.1:$port/mcp", 'prints the MCP URL');
like($token // '', qr/^[\w-]+\.[\w-]+\.[\w-]+$/, 'prints a bearer token');

# the summary: "sandbox-mcp VERSION is up.", then a line per label, every
# value starting in the same column; the claude line adds this server
summary_ok($out, "http://127.0.0.1:$port");

sub summary_ok {
    my ($out, $base) = @_;
    my $version = smcp_version();
    like($out, qr/^sandbox-mcp \Q$version\E is up\.$/m,
         "make up: \"sandbox-mcp $version is up.\"");
    my ($block) = $out =~ /^sandbox-mcp (?:.* )?is up\.\n((?:  .*\n)+)/m;
    my @lines = split /\n/, $block // '';
    my %col = map { /^(  [A-Z][\w ]*: +)\S/ ? (length($1) => 1) : ('?' => 1) } @lines;
    is(join(',', keys %col), length('  Claude Code: '),
       'make up: every value of the summary in one column, '
       . scalar(@lines) . ' lines') or diag($out);
    my @labels = map { /^  ([^:]+):/ ? $1 : '?' } @lines;
    is("@labels", 'MCP URL Token Claude Code Dashboard Egress Routes Runner Metrics '
                  . 'Health Redis ' . ($ENV{SMCP_NOTIFY_ALLOW} ? 'Notify ' : '')
                  . 'Logs Stop', '... its labels');
    my %v = map { /^  ([^:]+): +(.*)$/ ? ($1 => $2) : () } @lines;
    my ($tok) = ($v{Token} // '') =~ /^(\S+)/;
    is($v{'MCP URL'}, "$base/mcp", "... the MCP URL at $base");
    like($v{Dashboard} // '', qr{^\Q$base\E/ui/\?token=[\w.-]+$},
         '... the dashboard link too');
    my ($curl, $ctok) = ($v{'Claude Code'} // '')
        =~ m{^claude mcp add --transport http sandbox-mcp (\S+) --header "Authorization: Bearer (\S+)"$};
    is($curl // 'none', "$base/mcp", '... the claude mcp add line: the MCP URL');
    like($tok // '', qr/^[\w-]+\.[\w-]+\.[\w-]+$/, '... a token on the Token: line');
    is($ctok // 'none', $tok // 'no token', '... the claude line\'s is that token');
    my (undef, $cl) = SMCP::Test::decode_jwt($tok // '');
    my ($exp) = ($v{Token} // '') =~ /expires (\S+)\)$/;
    is(iso2epoch($exp // '') // 'none', $cl->{exp} // 'no exp',
       "... the token's expiry (" . ($exp // 'none') . ')');
}

# operations: the Metrics: line, /metrics and /healthz of the MCP instance
{
    my ($murl) = $out =~ m{^  Metrics:\s+(\S+)}m;
    is($murl, "http://127.0.0.1:$port/metrics", 'prints the Metrics: URL');
    if ($egress) {
        like($out, qr{^  Metrics:.*egress: http://127\.0\.0\.1:$emport/metrics}m,
             '... and the egress instance\'s');
        like($out, qr{^  Metrics:.*runner: http://127\.0\.0\.1:$mport/metrics}m,
             '... and the runner\'s');
    }
    my $m = SMCP::Test->client(port => $port)->http(method => 'GET', path => '/metrics');
    is($m->{status}, 200, 'make up: /metrics answers on the loopback listener');
    like($m->{body}, qr/^# TYPE smcp_mcp_requests_total counter$/m, '... Prometheus text');
    my $h = SMCP::Test->client(port => $port)->http(method => 'GET', path => '/healthz');
    is($h->{status}, 200, 'make up: /healthz 200');
    like($h->{body}, qr/"redis":"ok"/, '... Redis ok');
    is((json_decode($h->{body}) // {})->{version}, smcp_version(), '... the version');
}

ok(-s "$state/secret", 'a secret was generated');
is(sprintf('%o', (stat "$state/secret")[2] & 07777), '600', '... mode 600');
{
    my @open = grep { ((stat $_)[2] & 0004) } split /\n/, `find $state -mindepth 1 2>/dev/null`;
    is_deeply(\@open, [], 'nothing in the state dir is readable by others (umask 077)');
}
{
    # Redis has a password (make up made it): nothing talks to it without
    my $pw = slurp("$state/redis-password");
    like($pw, qr/^[0-9a-f]{48}$/, 'a Redis password was generated');
    is(sprintf('%o', (stat "$state/redis-password")[2] & 07777), '600', '... mode 600');
    my $noauth = `REDISCLI_AUTH= redis-cli -p $rport PING 2>&1`;
    like($noauth, qr/NOAUTH/, 'redis: PING without the password is refused (NOAUTH)')
        or diag($noauth);
    unlike(`ps -eo args`, qr/\Q$pw\E/, '... and the password is on no command line')
        if length $pw;
    like($out, qr/^  Redis: .*redis-password/m, 'make up says where the password is');
    $ENV{REDISCLI_AUTH} = $pw;
}
{
    my %cfg = split /\n/, `redis-cli -p $rport CONFIG GET maxmemory*`
                        . `redis-cli -p $rport CONFIG GET client-output-buffer-limit`;
    is($cfg{maxmemory}, 536870912, 'redis: maxmemory from SMCP_REDIS_MAXMEMORY (512mb)');
    is($cfg{'maxmemory-policy'}, 'noeviction', 'redis: maxmemory-policy noeviction');
    like($cfg{'client-output-buffer-limit'} // '', qr/^normal 67108864 16777216 60 /,
         'redis: client-output-buffer-limit normal 64mb 16mb 60');
}
my $nginx_pid = slurp("$state/nginx.pid");
my $redis_pid = slurp("$state/redis.pid");
chomp($nginx_pid, $redis_pid);
ok($nginx_pid =~ /^\d+$/ && kill(0, $nginx_pid), 'nginx runs');
ok($redis_pid =~ /^\d+$/ && kill(0, $redis_pid), 'redis-server runs');

# the uids of a master's children (its workers)
sub worker_uids {
    my ($master) = @_;
    my @uids;
    for my $st (glob '/proc/[0-9]*/status') {
        open(my $fh, '<', $st) or next;
        my $c = do { local $/; <$fh> } // '';
        close $fh;
        next unless $c =~ /^PPid:\s+\Q$master\E$/m;
        push @uids, $1 if $c =~ /^Uid:\s+(\d+)/m;
    }
    return @uids;
}
my $nobody = getpwnam('nobody');
if ($> == 0) {
    my @u = worker_uids($nginx_pid);
    ok(@u && !grep({ $_ != $nobody } @u), 'the MCP nginx workers run as nobody, not root')
        or diag("uids @u");
    is((stat "$state/tmp/body")[4], $nobody, '... their temp dir is nobody\'s');
}

sub post { return $up->post(@_) }

require HTTP::Tiny;

my $init = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
    . '{"protocolVersion":"2025-11-25","capabilities":{},'
    . '"clientInfo":{"name":"stack.t","version":"1"}}}';

my $r = post($token, $init);
is($r->{status}, 200, 'the printed token initializes a session');
my $sid = $r->{headers}{'mcp-session-id'} // '';
like($sid, qr/^[0-9a-f]{64}$/, 'session id issued');

my $secret_file = "$state/secret";
my $tok3 = `$root/build/smcp-token --sub carol --ttl 600 --secret-file $secret_file 2>/dev/null`;
chomp $tok3;
is(post($tok3, $init)->{status}, 200, 'smcp-token --secret-file token accepted');

my (undef, $claims) = SMCP::Test::decode_jwt($tok3);
is($claims->{sub}, 'carol', 'token sub is the tenant');
ok($claims->{exp} > time() + 500 && $claims->{exp} <= time() + 601,
   'token exp honours --ttl');
is($claims->{scope}, 'mcp', 'token scope defaults to mcp');

my $bad = `$root/build/smcp-token --sub x --scope admin --secret-file $secret_file 2>&1`;
isnt($? >> 8, 0, 'smcp-token refuses an unknown scope');
my $nosecret = `env -u PROXY_JWT_SECRET $root/build/smcp-token --sub x 2>&1`;
like($nosecret, qr/PROXY_JWT_SECRET/, 'smcp-token without a secret says where it looks');

# the dashboard: make up's link, and `make token UI=1`
{
    my ($dash) = $out =~ m{^  Dashboard:\s+(\S+)}m;
    like($dash // '', qr{^http://127\.0\.0\.1:$port/ui/\?token=[\w.-]+$},
         'make up prints a Dashboard: link');
    my ($dt) = ($dash // '') =~ /token=([\w.-]+)/;
    my (undef, $dcl) = SMCP::Test::decode_jwt($dt // '');
    ok(ref $dcl->{repos} eq 'ARRAY' && @{ $dcl->{repos} },
       '... granting its MCP token\'s repositories: '
       . join(',', @{ ref $dcl->{repos} eq 'ARRAY' ? $dcl->{repos} : [] }));
    my ($r, $c) = $up->ui_open($dash);
    is($r->{status}, 303, '... which answers 303 with its cookie');
    $r = $up->ui_get($c, '/ui/');
    is($r->{status}, 200, '... then the run list');
    like($r->{content}, qr/runs\.js/, '... the list page');

    my ($rc, $link, $info) = run_cmd(['make', '-s', '-C', $root, 'token', 'SUB=dora',
                                      'UI=1', "SMCP_STATE=$state",
                                      "SMCP_LISTEN=127.0.0.1:$port"]);
    like($link, qr{^http://127\.0\.0\.1:$port/ui/\?token=[\w.-]+\n\z},
         'make token SUB=dora UI=1 prints a dashboard link, alone on stdout');
    like($info, qr/^jti: [0-9a-f]{32}\nexpires: \S+Z\nkid: k\d{14}-[0-9a-f]{4}\n\z/,
         '... its jti, expiry and kid (make up\'s keys) on stderr');
    my ($tok) = $link =~ /token=([\w.-]+)/;
    my (undef, $cl) = SMCP::Test::decode_jwt($tok // '');
    is_deeply([ @$cl{qw(sub scope)} ], [ 'dora', 'ui' ], '... a ui token of that tenant');
    ok(!exists $cl->{run}, '... for no one run');
    ok(!exists $cl->{repos}, '... granting no repository');
    my (undef, $rlink) = run_cmd(['make', '-s', '-C', $root, 'token', 'SUB=dora', 'UI=1',
                                  'REPOS=acme/*', "SMCP_STATE=$state",
                                  "SMCP_LISTEN=127.0.0.1:$port"]);
    my ($rtok) = ($rlink // '') =~ /token=([\w.-]+)/;
    my (undef, $rcl) = SMCP::Test::decode_jwt($rtok // '');
    is_deeply([ $rcl->{scope}, $rcl->{repos} ], [ 'ui', [ 'acme/*' ] ],
              "make token UI=1 REPOS='acme/*': a ui link granting acme/*");
    ($r) = $up->ui_open($link =~ s/\s+\z//r);
    is($r->{status}, 303, '... that the dashboard takes');
}

# SMCP_OAUTH=on: the sign-in's locations (oauth-locations.sh), and what a
# client without a token can have stored limited per address
{
    my $c = SMCP::Test->client(port => $port);
    my $meta = $c->http(method => 'GET', path => '/.well-known/oauth-authorization-server');
    is($meta->{status}, 200, 'SMCP_OAUTH=on: the authorization server\'s metadata');
    my $reg = { method => 'POST', path => '/oauth/register',
                headers => [ 'Content-Type' => 'application/json' ],
                body => json_encode({ redirect_uris => [ 'http://127.0.0.1:9/cb' ] }) };
    my %n;
    $n{ $_->{status} }++ for $c->http_keepalive(map { $reg } 1 .. 40);
    ok($n{201} && $n{429}, "... one address registering 40 clients at once: $n{201} 201, "
                           . ($n{429} // 0) . ' 429 (SMCP_OAUTH_BURST 30)');
    my $r = $c->http(%$reg);
    is($r->{status}, 429, '... then 429');
    is((json_decode($r->{body}) // {})->{error}, 'temporarily_unavailable', '... an OAuth error');
}

sub environ {
    my ($pid) = @_;
    open(my $fh, '<', "/proc/$pid/environ") or return undef;
    local $/;
    my $e = <$fh>;
    close $fh;
    return $e;
}

if (!$egress) {
    like($out, qr/^  Egress: +off$/m, 'prints Egress: off') or diag($out);
    like($out, qr/^  Routes: +off$/m, '... and Routes: off') or diag($out);
} else {
    # the routes runs can reach (those the egress announces to run_task)
    like($out, qr/^  Routes: +anthropic github github-api registry-npm registry-pypi-simple registry-pypi-files$/m,
         'prints the egress routes') or diag($out);
}

if ($egress) {
    # the egress proxy is an nginx instance of its own, the only holder of
    # the provider keys
    my $egress_pid = slurp("$state/egress.pid");
    chomp $egress_pid;
    ok($egress_pid =~ /^\d+$/ && kill(0, $egress_pid), 'the egress nginx runs');
    isnt($egress_pid, $nginx_pid, '... as its own instance (its own master)');
    my $key = $SMCP::MakeUp::KEY;
    my $eenv = slurp("$envdir/egress.conf.env");
    ok(length($eenv) && index($eenv, $key) < 0,
       '... started without the provider key in its environment (nginx\'s binary upgrade would lose it)');
    is(slurp("$state/provider-keys/ANTHROPIC_API_KEY"), $key,
       '... which make up wrote to provider-keys/ of the state directory');
    is(sprintf('%o', (stat "$state/provider-keys/ANTHROPIC_API_KEY")[2] & 07777), '600', '... mode 600');
    like(slurp("$state/egress-routes.conf"),
         qr{sandbox_mcp_egress_credential file:\Q$state\E/provider-keys/ANTHROPIC_API_KEY },
         '... and its routes read it from there');
    my $menv = slurp("$envdir/nginx.conf.env");
    ok(length($menv) && index($menv, $key) < 0,
       'the MCP nginx was started without the provider key in its environment');
    unlike($menv, qr/^(ANTHROPIC_API_KEY|GITHUB_TOKEN|PROXY_JWT_SECRET)=/m,
           '... nor any key variable');
    my $mconf = slurp("$state/nginx.conf");
    unlike($mconf, qr/sandbox_mcp_egress|\Q$key\E/, '... and its nginx.conf no egress route');
    like(slurp("$state/egress.conf"), qr/worker_connections 4096/,
         'egress.conf: its own worker_connections');
    if ($> == 0) {
        my @u = worker_uids($egress_pid);
        ok(@u && !grep({ $_ != $nobody } @u), 'the egress workers run as nobody')
            or diag("uids @u");
        is((stat "$state/tmp/egress/body")[4], $nobody, '... their temp dir is nobody\'s');
    }

    # the summary's Egress line: the listener once, on the gateway (the
    # subnet's first address), its network and the instance's pid
    (my $gw = $ENV{SMCP_SANDBOX_SUBNET}) =~ s{\.0/24$}{.1};
    my ($line) = $out =~ /^  Egress: +(.*)$/m;
    is($line, "http://$gw:$eport (sandbox network $net, nginx pid $egress_pid)",
       'prints the egress listener, once') or diag($out);
    my $ht = HTTP::Tiny->new(timeout => 10);
    my $r = $ht->get("http://$gw:$eport/nope");
    is($r->{status}, 404, 'egress listener up: unknown route 404');
    my $run = 'run_0123456789abcdef01234567';
    system("redis-cli -p $rport HSET smcp:run:$run tenant stack-tenant status running >/dev/null");
    my $etok = `$root/build/smcp-token --sub stack-tenant --scope egress --run $run --ttl 300 --secret-file $state/secret 2>/dev/null`;
    chomp $etok;
    $r = $ht->post("http://$gw:$eport/anthropic/v1/messages", {
        headers => { 'x-api-key' => $etok, 'content-type' => 'application/json' },
        content => '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}' });
    is($r->{status}, 200, 'egress: the anthropic route of make up works');
    is($fake->last_request->{headers}{'x-api-key'}, $key,
       'egress: the upstream got the real key');

    # the package registries make up enabled (SMCP_REGISTRIES=npm,pypi):
    # a packument rewritten to the egress, cached; a registry not enabled
    # and a write refused
    {
        my $eb = "http://$gw:$eport";
        my $get = sub {
            my ($path, $method) = @_;
            return $ht->request($method // 'GET', "$eb$path", {
                headers => { Authorization => "Bearer $etok" },
                ($method && $method eq 'PUT' ? (content => '{}') : ()) });
        };
        my $p = $get->('/registry/npm/smcp-pad');
        is($p->{status}, 200, 'make up: SMCP_REGISTRIES=npm serves a packument')
            or diag("$p->{status} $p->{content}");
        my $j = json_decode($p->{content} // '') // {};
        is($j->{versions}{'1.0.0'}{dist}{tarball},
           "$eb/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz",
           '... its tarball URL rewritten to the egress (NPM_REGISTRY_URL upstream)');
        is($get->('/registry/npm/smcp-pad')->{status}, 200, '... a second GET');
        is(scalar @{ $npm->requests(path => '/smcp-pad') }, 1,
           '... served from the cache (the upstream saw it once)');
        my $s = $get->('/registry/pypi/simple/smcp-demo/');
        is($s->{status}, 200, 'make up: the pypi simple page (PYPI_INDEX_URL)');
        like($s->{content} // '',
             qr{href="\Q$eb\E/registry/pypi/files/packages/ab/smcp_demo-1\.0-py3-none-any\.whl"},
             '... its file link rewritten to the files route (PYPI_FILES_URL)');
        my $w = $get->('/registry/pypi/files/packages/ab/smcp_demo-1.0-py3-none-any.whl');
        is($w->{status} . ' ' . ($w->{content} // ''), '200 PK wheel', '... which serves the file');
        is($get->('/registry/go/example.com/m/@v/list')->{status}, 403,
           'make up: a registry not enabled (go) is refused, 403');
        is($get->('/registry/npm/smcp-pad', 'PUT')->{status}, 405,
           'make up: PUT on a registry route is refused, 405');
        is(scalar @{ $npm->requests(method => 'PUT') }, 0, '... nothing upstream');
        # the audit (written at the log phase, after the answer): a miss, a hit
        my @pk;
        wait_until(30, sub {
            @pk = grep { ($_->{path} // '') eq '/registry/npm/smcp-pad'
                         && ($_->{method} // '') eq 'GET' }
                  map { json_decode($_) // {} }
                  grep { /^\{/ }
                  split /\n/, `redis-cli -p $rport --raw XRANGE smcp:run:$run:events - +`;
            return @pk >= 2;
        });
        # (the workers write their records independently: sorted)
        is(join(',', sort map { ($_->{route} // '') . ':' . ($_->{cache} // 'none') } @pk),
           'registry-npm:hit,registry-npm:miss',
           'make up: the run\'s audit events say one miss and one hit');
        my $rc = "$state/registry-cache";
        ok(-d $rc, 'make up: the registry cache lives in the state dir');
    }

    # a request body the egress workers (nobody) buffer in their temp dir:
    # a pull request with a large description
    system("redis-cli -p $rport HSET smcp:run:$run repository https://github.com/owner/repo create_pr 1 >/dev/null");
    my $pr = json_encode({ title => 't', head => "opencode/$run", base => 'main',
                           body => 'x' x 100_000 });
    $r = $ht->post("http://$gw:$eport/github-api/repos/owner/repo/pulls", {
        headers => { Authorization => "Bearer $etok", 'content-type' => 'application/json' },
        content => $pr });
    is($r->{status}, 422, 'egress: a 100 KB pull request body is read (by nobody) and passed on')
        or diag("$r->{status} $r->{content}");
    my $got = $gh->last_request(method => 'POST');
    is($got && $got->{body_length}, length($pr), '... whole');

    # the whole stack: a task through the printed URL completes (MakeUp's
    # call: the run's session volume goes at the end)
    my $call = sub { $up->call($token, $sid, @_) };
    my $rt = $call->('opencode_run_task', { task => 'SCENARIO-HELLO: say hello.',
                                            notify => { url => $rcv->url . '/hooks/stack' } });
    like($rt->{runId} // '', qr/^run_[0-9a-f]{24}$/, 'make up: run_task answers');
    my $res = {};
    for (1 .. 15) {
        $res = $call->('opencode_get_result',
                       { runId => $rt->{runId}, waitSeconds => 20 });
        last if ($res->{status} // '') =~ /^(completed|failed|cancelled)$/;
    }
    is($res->{status}, 'completed', 'make up: the task completes')
        or diag(explain($res), `tail -20 $state/logs/runner.log`);
    is($res->{result}, 'stack run done', 'make up: with the model\'s answer');
    # its notification: through make up's egress, signed with the secret
    # make up made (its summary names it)
    my @got;
    ok(wait_until(60, sub { @got = $rcv->requests(path => '/hooks/stack'); @got }),
       'make up: the run\'s notification reached the receiver (SMCP_NOTIFY_ALLOW)')
        or diag(`tail -20 $state/logs/runner.log`);
    my ($secret) = split /\n/, slurp("$state/notify-secret");
    my $n = $got[0] || { headers => {} };
    ok(SMCP::Receiver::verify($secret // '', $n->{headers}{'x-smcp-timestamp'} // '',
                              SMCP::Receiver::raw($n), $n->{headers}{'x-smcp-signature'} // ''),
       '... signed with make up\'s notify-secret');
    is($n->{json} && $n->{json}{status}, 'completed', '... saying the run completed');
    like($out, qr{^  Notify: +to \Q$ENV{SMCP_NOTIFY_ALLOW}\E \(signed with \Q$state\E/notify-secret\)$}m,
         '... and make up\'s summary says where notifications go');
    # (the run's status is stored before its log line is written)
    my $rlog = '';
    wait_until(30, sub { $rlog = slurp("$state/logs/runner.log");
                        $rlog =~ /run=\Q$rt->{runId}\E msg="completed/ });
    like($rlog, qr/run=\Q$rt->{runId}\E msg="completed/, 'runner log: completed');

    steer_through_make_up($call, $rlog);

    my $rpid = slurp("$state/runner.pid");
    chomp $rpid;
    my $renv = $rpid =~ /^\d+$/ ? environ($rpid) : undef;
    ok(defined $renv && index($renv, $key) < 0, 'the runner\'s environment holds no provider key');

    # supervised: a crashed runner is restarted, the crash logged
    my $spid = (slurp("$state/supervisor.pid") =~ /(\d+)/)[0] // 0;
    ok($spid && kill(0, $spid), 'the runner\'s supervisor runs');
    kill 'KILL', $rpid;
    my $new = 0;
    ok(wait_until(15, sub {
        $new = (slurp("$state/runner.pid") =~ /(\d+)/)[0] // 0;
        return $new && $new != $rpid && kill(0, $new);
    }), 'a killed runner is restarted by its supervisor');
    $rlog = slurp("$state/logs/runner.log");
    like($rlog, qr/smcp-runner \(pid $rpid\) killed by signal 9 \(KILL\) after \d+ s; restarting in 1 s/,
         '... the crash logged with its signal, and the restart');
    # the two lines in either order: the new runner may write its own
    # before the supervisor's (which runs date(1) first) lands
    ok(wait_until(30, sub { my $l = slurp("$state/logs/runner.log");
                            $l =~ /smcp-runner started \(pid $new\)/
                            && $l =~ /pid=$new msg="smcp-runner \S+ starting: name=/ }),
       '... the new runner is up (its start line, and the supervisor\'s)')
        or diag(join("", grep { defined } (split(/^/m, slurp("$state/logs/runner.log") // ""))[-20 .. -1]));

    # the runner's and the egress instance's metrics, and its heartbeat
    my $rm;
    ok(wait_until(10, sub {
        $rm = eval { SMCP::Test->client(port => $mport)->http(method => 'GET',
                                                              path => '/metrics') };
        return $rm && $rm->{status} == 200;
    }, 0.3), 'make up: the runner serves its metrics');
    like($rm->{body} // '', qr/^smcp_runner_runs_total\{outcome="completed"\} \d+$/m,
         '... runs by outcome');
    my $em = SMCP::Test->client(port => $emport)->http(method => 'GET', path => '/metrics');
    like($em->{body} // '', qr/^smcp_egress_requests_total\{route="anthropic",status="2xx"\} [1-9]/m,
         'make up: the egress instance counted the model\'s requests');
    my ($hz_ok, $hz) = $up->runners_ok(10);
    ok($hz_ok, 'make up: /healthz sees the runner\'s heartbeat') or diag($hz);
}

# the warm pool, on by default: a run on the warmed pooled sandbox, and a
# message sent while its agent works (a command of 8 s) in the model's
# next request, after the command's result
sub steer_through_make_up {
    my ($call, $rlog) = @_;
    like($out, qr/^  Runner: .*, warm pool 1, sessions held 120 s$/m,
         'make up: the warm pool on by default, and sessions held 120 s');
    my ($rname) = $rlog =~ /starting: name=(\S+)/;
    ok(SMCP::Stack->wait_pool_warm({ name => $rname // '' }, 300),
       'make up: the pooled sandbox is made and its OpenCode warmed');
    my $st = $call->('opencode_run_task', { task => 'SCENARIO-STEER: wait, then answer' });
    my $id = $st->{runId} // '';
    ok(wait_until(120, sub {
        grep { ($_->{body} // '') =~ /SCENARIO-STEER/ } $fake->requests(path => qr{/messages$})
    }, 0.2), 'make up: the steered run asked the model');
    my $m = $call->('opencode_send_message',
                    { runId => $id, message => "$MARK: also say steered" });
    is($m->{status}, 'queued', 'make up: opencode_send_message queues the message')
        or diag(explain($m));
    my $res = {};
    for (1 .. 15) {
        $res = $call->('opencode_get_result', { runId => $id, waitSeconds => 20 });
        last if ($res->{status} // '') =~ /^(completed|failed|cancelled)$/;
    }
    is($res->{status}, 'completed', 'make up: the steered run completes') or diag(explain($res));
    my @ev = map { json_decode($_) // {} } grep { /^\{/ } split /\n/,
             `redis-cli -p $rport --raw XRANGE smcp:run:$id:events - +`;
    ok((grep { ($_->{step} // '') eq 'agent_start' && $_->{warm} } @ev),
       'make up: the run took the warm pooled sandbox');
    ok((grep { ($_->{body} // '') =~ /\Q$MARK\E/ } $fake->requests(path => qr{/messages$})),
       'make up: the message reached the model');

    # the session's next run, started from the dashboard (make up's
    # Dashboard: link, the run page's follow-up box's request), takes the
    # sandbox held for it, warm
    my ($dash) = $out =~ m{^  Dashboard:\s+(\S+)}m;
    my (undef, $cookie) = $up->ui_open($dash);
    my $post = HTTP::Tiny->new(timeout => 30)->post("http://127.0.0.1:$port/ui/api/runs", {
        headers => { Cookie => $cookie, Origin => "http://127.0.0.1:$port",
                     'X-SMCP-CSRF' => 1, 'Content-Type' => 'application/json' },
        content => json_encode({ task => 'SCENARIO-HELLO: and again',
                                 sessionId => $st->{sessionId} }) });
    is($post->{status}, 200, 'make up: the Dashboard: link starts the session\'s follow-up')
        or diag($post->{content});
    my $f = json_decode($post->{content}) // {};
    is($f->{sessionId}, $st->{sessionId}, '... in the session');
    my $fid = $f->{runId} // '';
    for (1 .. 15) {
        $res = $call->('opencode_get_result', { runId => $fid, waitSeconds => 20 });
        last if ($res->{status} // '') =~ /^(completed|failed|cancelled)$/;
    }
    is($res->{status}, 'completed', 'make up: a follow-up completes') or diag(explain($res));
    @ev = map { json_decode($_) // {} } grep { /^\{/ } split /\n/,
          `redis-cli -p $rport --raw XRANGE smcp:run:$fid:events - +`;
    ok((grep { ($_->{step} // '') eq 'agent_start' && $_->{warm} } @ev),
       "make up: ... on the sandbox held for its session, warm");
}

# a second `up` is idempotent: same processes, reloaded config; with
# SMCP_PUBLIC_URL its summary gives the addresses there
$ENV{SMCP_PUBLIC_URL} = 'https://mcp.example.test/';
(my $rc2, $out) = $up->up;
delete $ENV{SMCP_PUBLIC_URL};
is($rc2, 0, 'second stack up exits 0') or diag($out);
summary_ok($out, 'https://mcp.example.test');
my $nginx_pid2 = slurp("$state/nginx.pid");
chomp $nginx_pid2;
is($nginx_pid2, $nginx_pid, 'second up keeps the same nginx master');

(my $rcd, $out) = $up->down;
is($rcd, 0, 'stack down exits 0') or diag($out);
ok(wait_until(30, sub { !kill(0, $nginx_pid) }), 'nginx stopped');
if ($egress) {
    my $epid = (slurp("$state/egress.pid") =~ /(\d+)/)[0] // 0;
    ok(!$epid || wait_until(30, sub { !kill(0, $epid) }), 'the egress nginx stopped');
}
ok(wait_until(30, sub { !kill(0, $redis_pid) }), 'redis-server stopped');
ok(!-f "$state/runner.pid"
   || !kill(0, (slurp("$state/runner.pid") =~ /(\d+)/)[0] // 0),
   'runner stopped');
ok(!-f "$state/supervisor.pid", '... and its supervisor');
if ($egress) {
    my $nets = `docker network ls --format '{{.Name}}'`;
    unlike($nets, qr/^\Q$net\E$/m, 'make down removed the sandbox network');
    my $pooled = `docker ps -a --filter label=smcp.pool --format '{{.Names}} {{.Networks}}'`;
    unlike($pooled, qr/ \Q$net\E$/m, 'make down left no pooled sandbox');
    my $held = `docker ps -a --filter label=smcp.hold --format '{{.Names}} {{.Networks}}'`;
    unlike($held, qr/ \Q$net\E$/m, '... and no sandbox held for a session');
    my $rules = `iptables -S INPUT`;
    unlike($rules, qr/smcp:\Q$net\E/, 'make down removed its iptables rules');
    $up->stop_fakes;
}

my $log = slurp("$state/logs/error.log");
unlike($log, qr/\[(alert|crit|emerg)\]/, 'no alert/crit/emerg in the stack error.log');
is(scalar(() = $log =~ /\[notice\] \d+#\d+: ngx_http_sandbox_mcp_module \Q${\ smcp_version()}\E$/mg),
   2, 'the stack error.log: the module\'s name and version at start and at the reload');
my $elog = slurp("$state/logs/egress-error.log");
unlike($elog, qr/\[(alert|crit|emerg)\]/, '... nor in the egress error log');
unlike($log, qr/\Q$token\E/, 'the token never appears in the log');

done_testing();
