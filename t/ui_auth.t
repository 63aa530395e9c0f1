#!/usr/bin/perl

# The dashboard's tokens and headers (sandbox_mcp_ui at /ui/): the watchUrl
# moves its token into a path-scoped HttpOnly SameSite=Strict cookie with a
# 303 to the address without it; a tenant link does the same for the run
# list; bad, expired, alg none, wrong-scope, another run's, revoked tokens
# get the 401 page, which holds no run data and says how to get a new link
# (and that advice works); a run's token reads its run only: not its
# session's other runs, not even their ids (issue 23, 11), while the
# tenant's token, also when held with a run's, opens them; another
# tenant's run is not found; every answer carries the CSP and the other
# headers; the pages and assets are the embedded files of
# ngx_sandbox_mcp_module/ui/.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(json_decode now_ms rhex);
use SMCP::UI;

my $t = SMCP::Test->new(
    workers => 2,
    server  => q{
        location /ui/ {
            sandbox_mcp_ui;
        }
        location /board/ {
            sandbox_mcp_ui;
            sandbox_mcp_public_url https://dash.example;
        }},
);
$t->start;

my $P = 'smcp:';
my $ui = SMCP::UI->new($t);

my $CSP = "default-src 'self'; script-src 'self'; style-src 'self'; "
        . "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
        . "base-uri 'none'; form-action 'self'";

sub headers_ok {
    my ($r, $what, %o) = @_;
    is($r->{headers}{'content-security-policy'}, $CSP, "$what: CSP");
    is($r->{headers}{'referrer-policy'}, 'no-referrer', "$what: Referrer-Policy");
    is($r->{headers}{'x-content-type-options'}, 'nosniff', "$what: nosniff");
    is($r->{headers}{'cache-control'}, 'no-store', "$what: no-store")
        unless $o{cached};
}

# a real run, through MCP, and its watchUrl
my ($sid) = $t->initialize;
my $res = $t->call_tool($sid, 'opencode_run_task',
                        { task => 'SECRET-TASK-TEXT fix the tests', title => 'ui run' });
my $run = SMCP::Test::sc($res) || {};
like($run->{runId} // '', qr/^run_[0-9a-f]{24}$/, 'a run');
my $watch = $run->{watchUrl} // '';
like($watch, qr{^http://127\.0\.0\.1:\d+/ui/runs/\Q$run->{runId}\E\?token=[\w.-]+$},
     'watchUrl points at the ui location');
my ($wpath) = $watch =~ m{^https?://[^/]+(/.*)$};
my ($wtok) = $watch =~ /token=([\w.-]+)/;
my (undef, $wcl) = SMCP::Test::decode_jwt($wtok);
is($wcl->{scope}, 'ui', 'watch token: scope ui');
is($wcl->{run}, $run->{runId}, '... its run');
like($wcl->{jti} // '', qr/^[0-9a-f]{32}$/, '... a token id (revocable)');

my $id = $run->{runId};

###############################################################################
# the watchUrl: 303 + cookie, address without the token

my $r = $t->http(path => $wpath);
is($r->{status}, 303, 'watchUrl: 303 See Other');
like($r->{headers}{location} // '', qr{(^|//[^/]+)/ui/runs/\Q$id\E$},
     '... to the run page without the token');
unlike($r->{headers}{location} // '', qr/token/, '... no token in Location');
my $sc = $r->{headers}{'set-cookie'} // '';
like($sc, qr/^smcp_ui_run=\Q$wtok\E; /, '... the token in the run cookie');
like($sc, qr/; Path=\/ui\/runs\/\Q$id\E(;|$)/, '... scoped to the run page');
like($sc, qr/; HttpOnly(;|$)/, '... HttpOnly');
like($sc, qr/; SameSite=Strict(;|$)/, '... SameSite=Strict');
unlike($sc, qr/Secure/, '... not Secure under http');
like($sc, qr/; Max-Age=(\d+)/, '... lives as long as the token');
headers_ok($r, '303');

my $cookie = "smcp_ui_run=$wtok";

$r = $t->http(path => "/ui/runs/$id", headers => [Cookie => $cookie]);
is($r->{status}, 200, 'run page with the cookie: 200');
like($r->{headers}{'content-type'} // '', qr{^text/html; charset=utf-8}, '... html');
is($r->{body}, $ui->file('run.html'), '... the embedded ui/run.html');
headers_ok($r, 'run page');

$r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => $cookie]);
is($r->{status}, 200, 'data with the cookie: 200');
my $d = json_decode($r->{body}) || {};
is($d->{runId}, $id, '... the run');
is($d->{task}, 'SECRET-TASK-TEXT fix the tests', '... its task');
is($d->{access}, 'run', '... access "run": the watchUrl opens this run only');
ok(!exists $d->{sessionRuns}, '... nothing of its session');
headers_ok($r, 'data');

# under https (sandbox_mcp_public_url): Secure
$r = $t->http(path => "/board/runs/$id?token=$wtok");
is($r->{status}, 303, 'https location: 303');
like($r->{headers}{'set-cookie'} // '', qr/; Path=\/board\/runs\/\Q$id\E;.*; Secure$/,
     '... its cookie is Secure, scoped to that location');
is($r->{headers}{location}, "https://dash.example/board/runs/$id",
   '... Location at sandbox_mcp_public_url (a proxy may terminate TLS)');

###############################################################################
# refused: the 401 page, no run data

my $other = 'run_' . rhex();
$t->redis('HSET', "${P}run:$other", tenant => 'alice', status => 'running',
          task => 'OTHER-RUN-TASK', title => 'other', created_at => now_ms());

my %bad = (
    'tampered'       => do { my $x = $wtok; $x =~ s/(.)$/$1 eq 'A' ? 'B' : 'A'/e; $x },
    'expired'        => $t->token(scope => 'ui', run => $id, exp => time() - 10),
    'alg none'       => $t->token(scope => 'ui', run => $id, alg => 'none'),
    'scope mcp'      => $t->token(scope => 'mcp', run => $id),
    'scope egress'   => $t->token(scope => 'egress', run => $id),
    'another run'    => $t->token(scope => 'ui', run => $other),
    'other secret'   => $t->token(scope => 'ui', run => $id, secret => 'x' x 40),
    'garbage'        => 'not.a.token',
);

for my $name (sort keys %bad) {
    my $r = $t->http(path => "/ui/runs/$id?token=$bad{$name}");
    is($r->{status}, 401, "token $name: 401");
    is($r->{body}, $ui->file('denied.html'), '... the denied page');
    unlike($r->{body}, qr/SECRET-TASK|OTHER-RUN|\Q$id\E/, '... no run data');
    ok(!$r->{headers}{'set-cookie'}, '... no cookie');
    headers_ok($r, "401 ($name)");

    $r = $t->http(path => "/ui/runs/$id/data",
                  headers => [Cookie => "smcp_ui_run=$bad{$name}"]);
    is($r->{status}, 401, "... as the cookie: data 401");
    unlike($r->{body}, qr/SECRET-TASK/, '... no run data');
}

# one run's token on another run, by cookie
for my $path ("/ui/runs/$other", "/ui/runs/$other/data",
              "/ui/runs/$other/diff", "/ui/runs/$other/events")
{
    my $r = $t->http(path => $path, headers => [Cookie => $cookie], timeout => 5);
    is($r->{status}, 401, "run token on another run: $path 401");
    unlike($r->{body}, qr/OTHER-RUN/, '... no run data');
}

# a run token is no tenant token, even as the tenant cookie
for my $path ('/ui/', '/ui/api/runs', '/ui/api/stream') {
    my $r = $t->http(path => $path, headers => [Cookie => "smcp_ui=$wtok"], timeout => 5);
    is($r->{status}, 401, "run token as the tenant cookie: $path 401");
}
$r = $t->http(path => "/ui/?token=$wtok");
is($r->{status}, 401, 'run token as a tenant link: 401');

# no cookie at all
$r = $t->http(path => "/ui/runs/$id");
is($r->{status}, 401, 'no token: 401 page');
is($r->{body}, $ui->file('denied.html'), '... denied.html');

# the 401s say how to get a new link (issue 23, 11), and the advice works
like($r->{body}, qr{<code>opencode_get_result</code>.*<code>watchUrl</code>}s,
     '401 page: a run\'s new link is opencode_get_result\'s watchUrl');
like($r->{body}, qr{make token SUB=&lt;tenant&gt; UI=1},
     '... the list\'s: make token SUB=<tenant> UI=1');
$r = $t->http(path => "/ui/runs/$id/data");
is($r->{status}, 401, 'data without a token: 401');
like((json_decode($r->{body}) || {})->{error} // '',
     qr{watchUrl again \(opencode_get_result returns it\).*`make token SUB=<tenant> UI=1`},
     '... its message says how to get a new link');
{
    my $sc = SMCP::Test::sc($t->call_tool($sid, 'opencode_get_result', { runId => $id })) || {};
    my ($path) = ($sc->{watchUrl} // '') =~ m{^https?://[^/]+(/ui/runs/\Q$id\E\?token=.+)$};
    my $r = $t->http(path => $path // '/ui/nothing');
    my ($c) = ($r->{headers}{'set-cookie'} // '') =~ /^(smcp_ui_run=[^;]+)/;
    is($r->{status}, 303, "opencode_get_result's watchUrl: 303");
    $r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => $c // '']);
    is((json_decode($r->{body}) || {})->{runId}, $id, '... and its cookie opens the run');
}

###############################################################################
# the tenant's link: the list, any of its runs

my $ttok = $t->token(scope => 'ui', repos => undef);
$r = $t->http(path => "/ui/?token=$ttok");
is($r->{status}, 303, 'tenant link: 303');
like($r->{headers}{location} // '', qr{(^|//[^/]+)/ui/$}, '... to the list');
$sc = $r->{headers}{'set-cookie'} // '';
like($sc, qr/^smcp_ui=\Q$ttok\E; Path=\/ui\/; /, '... tenant cookie scoped to the location');
like($sc, qr/HttpOnly; SameSite=Strict/, '... HttpOnly, SameSite=Strict');

my $tcookie = "smcp_ui=$ttok";
$r = $t->http(path => '/ui/', headers => [Cookie => $tcookie]);
is($r->{status}, 200, 'list page: 200');
is($r->{body}, $ui->file('runs.html'), '... the embedded ui/runs.html');
headers_ok($r, 'list page');

$r = $t->http(path => "/ui/runs/$other/data", headers => [Cookie => $tcookie]);
is($r->{status}, 200, 'tenant token opens any of its runs');
is((json_decode($r->{body}) || {})->{task}, 'OTHER-RUN-TASK', '... that run');
is((json_decode($r->{body}) || {})->{access}, 'tenant', '... access "tenant"');

###############################################################################
# a run's token and its session (issue 23, 11): one leaked watchUrl opens
# its run, not the session's other runs, earlier or later

my $later = SMCP::Test::sc($t->call_tool($sid, 'opencode_run_task',
                           { task => 'LATER-RUN-TASK in the session', title => 'later',
                             sessionId => $run->{sessionId} })) || {};
like($later->{runId} // '', qr/^run_/, 'a later run of the session');
my $lid = $later->{runId} // 'run_' . ('0' x 24);

$r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => $cookie]);
is($r->{status}, 200, 'the run token: its run');
unlike($r->{body}, qr/\Q$lid\E|LATER-RUN/, '... not a word of the later run');

for my $path ("/ui/runs/$lid", "/ui/runs/$lid/data", "/ui/runs/$lid/diff",
              "/ui/runs/$lid/events", "/ui/api/runs?sessionId=$run->{sessionId}")
{
    my $r = $t->http(path => $path, headers => [Cookie => $cookie], timeout => 5);
    is($r->{status}, 401, "the run token on its session: $path 401");
    unlike($r->{body}, qr/LATER-RUN/, '... no run data');
}
$r = $t->http(method => 'POST', path => "/ui/runs/$lid/cancel", body => '',
              headers => [Cookie => $cookie, 'Sec-Fetch-Site' => 'same-origin',
                          'X-SMCP-CSRF' => 1]);
is($r->{status}, 401, '... nor cancels its later run');
is($t->redis('HGET', "${P}run:$lid", 'status'), 'started', '... which is unchanged');

# the tenant's token: the session's runs
$r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => $tcookie]);
$d = json_decode($r->{body}) || {};
is($d->{access}, 'tenant', 'the tenant token: access "tenant"');
is_deeply([ map { $_->{runId} } @{ $d->{sessionRuns} || [] } ], [ $lid ],
          '... and the session\'s other runs');

# both cookies, as a browser sends them on a run page: the tenant's rights
$r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => "$cookie; $tcookie"]);
$d = json_decode($r->{body}) || {};
is($d->{access}, 'tenant', 'run and tenant cookies: access "tenant"');
is_deeply([ map { $_->{runId} } @{ $d->{sessionRuns} || [] } ], [ $lid ],
          '... the session\'s other runs');

# a tenant link on a run page: the tenant cookie
$r = $t->http(path => "/ui/runs/$id?token=$ttok");
is($r->{status}, 303, 'tenant token on a run page: 303');
like($r->{headers}{'set-cookie'} // '', qr/^smcp_ui=.*; Path=\/ui\/;/, '... the tenant cookie');

# another tenant
my $bob = $t->token(sub => 'bob', scope => 'ui', repos => undef);
for my $path ("/ui/runs/$id/data", "/ui/runs/$id/diff", "/ui/runs/$id/events") {
    my $r = $t->http(path => $path, headers => [Cookie => "smcp_ui=$bob"], timeout => 5);
    is($r->{status}, 404, "another tenant: $path 404");
    unlike($r->{body}, qr/SECRET-TASK/, '... no run data');
}
my $bobrun = $t->token(sub => 'bob', scope => 'ui', run => $id);
$r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => "smcp_ui_run=$bobrun"]);
is($r->{status}, 404, "another tenant's token naming the run: 404");
unlike($r->{body}, qr/SECRET-TASK/, '... no run data');

# alice's run token and bob's tenant token: alice's run, no more
$r = $t->http(path => "/ui/runs/$id/data", headers => [Cookie => "$cookie; smcp_ui=$bob"]);
$d = json_decode($r->{body}) || {};
is($r->{status}, 200, "a run cookie beside another tenant's cookie: the run");
is($d->{runId}, $id, '... that run');
is($d->{access}, 'run', '... access "run": no tenant rights from bob\'s token');
ok(!exists $d->{sessionRuns}, '... nothing of its session');

$r = $t->http(path => '/ui/api/runs', headers => [Cookie => "smcp_ui=$bob"]);
is($r->{status}, 200, "bob's list");
is_deeply([ map { $_->{runId} } @{ (json_decode($r->{body}) || {})->{runs} || [] } ], [],
          "... holds none of alice's runs");

# revoked
{
    my $jti = rhex(16);
    my $exp = time() + 3600;
    my $tok = $t->token(scope => 'ui', repos => undef, jti => $jti, exp => $exp);
    $r = $t->http(path => '/ui/', headers => [Cookie => "smcp_ui=$tok"]);
    is($r->{status}, 200, 'a token with an id works');
    $t->redis('HSET', "${P}revoked", $jti, $exp);
    $t->redis('PUBLISH', "${P}revoked", "$jti $exp");
    my %st;
    SMCP::Test::wait_until(30, sub {
        %st = ();
        $st{ $t->http(path => '/ui/', headers => [Cookie => "smcp_ui=$tok"])->{status} }++
            for 1 .. 6;
        return !$st{200};
    });
    is_deeply(\%st, { 401 => 6 }, 'revoked: 401 from every worker');
}

###############################################################################
# assets, routes, methods

for my $name ($ui->assets) {
    for my $path ("/ui/$name", "/ui/runs/$name") {
        my $r = $t->http(path => $path);
        is($r->{status}, 200, "$path: 200 without a token");
        is($r->{body}, $ui->file($name), '... the embedded file');
        is($r->{headers}{'content-type'}, $ui->type($name), '... its type');
        like($r->{headers}{etag} // '', qr/^"[0-9a-f]{16}"$/, '... an ETag');
        headers_ok($r, $path, cached => 1);
        my $r2 = $t->http(path => $path,
                          headers => ['If-None-Match' => $r->{headers}{etag}]);
        is($r2->{status}, 304, '... 304 when unchanged');
    }
}

for my $path ('/ui/static/nope.js', '/ui/static/../run.html', '/ui/runs/run_x',
              '/ui/api/nothing', "/ui/runs/$id/nothing", '/ui/static/')
{
    my $r = $t->http(path => $path, headers => [Cookie => $cookie]);
    is($r->{status}, 404, "$path: 404");
    unlike($r->{body}, qr/SECRET-TASK/, '... nothing of a run');
}

$r = $t->http(method => 'POST', path => "/ui/runs/$id", body => '',
              headers => [Cookie => $cookie]);
is($r->{status}, 405, 'POST on a page: 405');
$r = $t->http(method => 'GET', path => "/ui/runs/$id/cancel", headers => [Cookie => $cookie]);
is($r->{status}, 405, 'GET cancel: 405');
is($t->redis('HGET', "${P}run:$id", 'status'), 'started', '... nothing cancelled');

$r = $t->http(method => 'HEAD', path => "/ui/runs/$id", headers => [Cookie => $cookie]);
is($r->{status}, 200, 'HEAD of a page');

$t->done;
