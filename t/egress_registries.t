#!/usr/bin/env perl
# Package registries through the egress proxy (issue 14), on the host: the
# routes egress-routes.sh renders for SMCP_REGISTRIES, in front of
# stand-in registries this test starts (static npm packuments and
# tarballs, a PyPI simple index and its files host, a Go module proxy, a
# private Maven repository; on a second server crates, rubygems, debian):
# the run token is required, only GET and HEAD pass (PUT/POST/DELETE: 405,
# audited, nothing upstream), metadata naming the upstream is rewritten to
# the egress, the cache is shared (the upstream sees each file once, the
# audit says miss then hit), a registry not enabled is refused, and a
# private registry's credential replaces the token.  In front of an
# Artifactory-like stand-in (Tomcat's "..;", X-Forwarded-Host): no path
# leaves the route's prefix, and no header of one run reaches the
# upstream and so the cache every run shares.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use MIME::Base64 ();
use File::Path qw(make_path);
use Test::More;
use SMCP::Test qw(:all);
use SMCP::Fakes;

my $t = SMCP::Test->new(workers => 2);
my $dir = $t->{dir};

# how many requests a stand-in saw (for PATH)
sub seen {
    my ($fake, $path) = @_;
    return scalar @{ $fake->requests(defined $path ? (path => $path) : ()) };
}

###############################################################################
# the stand-in registries

my $npm = SMCP::Fakes::start_static(root => "$dir/npm", kind => 'npm',
    headers => [ 'Cache-Control' => 'no-cache', 'Set-Cookie' => 'tracker=1' ]);
my $pypi = SMCP::Fakes::start_static(root => "$dir/pypi", kind => 'pypi');
my $files = SMCP::Fakes::start_static(root => "$dir/files", kind => 'files');
my $goproxy = SMCP::Fakes::start_static(root => "$dir/go", kind => 'goproxy');
my $maven = SMCP::Fakes::start_static(root => "$dir/maven", kind => 'maven');
my $crates = SMCP::Fakes::start_static(root => "$dir/crates", kind => 'crates');
my $gems = SMCP::Fakes::start_static(root => "$dir/gems", kind => 'rubygems');
my $deb = SMCP::Fakes::start_static(root => "$dir/deb", kind => 'debian');

# npm: a packument naming the upstream, and its tarball
{
    my $pkg = "$dir/build/package";
    spew("$pkg/package.json", '{"name":"smcp-pad","version":"1.0.0","main":"index.js"}');
    spew("$pkg/index.js", "module.exports = (s, n) => s.padStart(n);\n");
    make_path("$dir/npm/smcp-pad/-");
    my ($rc, $out, $err) = run_cmd(['tar', '-czf', "$dir/npm/smcp-pad/-/smcp-pad-1.0.0.tgz",
                                    '-C', "$dir/build", 'package']);
    die "tar: $err" if $rc;
    my $up = $npm->url;
    spew("$dir/npm/smcp-pad/index.json", json_encode({
        name => 'smcp-pad', 'dist-tags' => { latest => '1.0.0' },
        versions => { '1.0.0' => { name => 'smcp-pad', version => '1.0.0',
            dist => { tarball => "$up/smcp-pad/-/smcp-pad-1.0.0.tgz" } } } }));
}
# PyPI: the simple page links the files host; a wheel-like file there
my $wheel = 'smcp_demo-1.0-py3-none-any.whl';
{
    spew("$dir/files/packages/ab/$wheel", "PK\x03\x04 not really a wheel " . rhex(64));
    my $sum = sha256_hex(slurp("$dir/files/packages/ab/$wheel"));
    my $fu = $files->url;
    spew("$dir/pypi/simple/smcp-demo/index.html",
             qq{<!DOCTYPE html><html><body>\n}
           . qq{<a href="$fu/packages/ab/$wheel#sha256=$sum">$wheel</a>\n}
           . qq{</body></html>\n});
}
# Go: a module proxy's files for example.com/m
for my $f (['list', "v1.0.0\n"], ['v1.0.0.info', '{"Version":"v1.0.0"}'],
           ['v1.0.0.mod', "module example.com/m\n"], ['v1.0.0.zip', 'PK zip ' . rhex(32)]) {
    spew("$dir/go/example.com/m/\@v/$f->[0]", $f->[1]);
}
spew("$dir/maven/org/x/lib/1.0/lib-1.0.jar", 'jar ' . rhex(16));
# crates: the sparse index's config.json names the download host
spew("$dir/crates/index/config.json",
     json_encode({ dl => $crates->url . '/dl', api => 'https://crates.example' }));
spew("$dir/crates/index/sm/cd/smcp-demo", qq({"name":"smcp-demo","vers":"1.0.0"}\n));
spew("$dir/crates/dl/smcp-demo/1.0.0/download", 'crate ' . rhex(16));
spew("$dir/gems/gems/smcp-1.0.gem", 'gem ' . rhex(16));
spew("$dir/deb/debian/dists/bookworm/InRelease", "Origin: Debian\n");
spew("$dir/deb/debian/pool/main/s/smcp/smcp_1.0_all.deb", 'deb ' . rhex(16));

###############################################################################
# the egress proxy with npm, pypi, go and a private maven enabled

my $eport = $t->free_port;
my $private = 'Bearer private-REAL-' . rhex();
my %env = (
    SMCP_REGISTRIES => 'npm,pypi,go,maven',
    SMCP_REGISTRY_CACHE_DIR => "$dir/registry-cache",
    SMCP_REGISTRY_CACHE_SIZE => '64m',
    NPM_REGISTRY_URL => $npm->url,
    PYPI_INDEX_URL => $pypi->url . '/simple',
    PYPI_FILES_URL => $files->url,
    GOPROXY_URL => $goproxy->url,
    MAVEN_URL => $maven->url,
    MAVEN_AUTH => $private,
    SMCP_EGRESS_RATE => '1000r/s',
);
local @ENV{keys %env} = values %env;

ok(!eval { $t->render_routes(name => 'bad', SMCP_REGISTRIES => 'npm,cpan') },
   'an unknown registry name is an error');
like($@, qr/unknown registry 'cpan'/, '... which names it');
ok(!eval { $t->render_routes(name => 'bad', NPM_REGISTRY_URL => 'http://x/ y') },
   'a bad upstream URL is an error');
ok(eval { $t->render_routes }, 'egress-routes.sh renders the registry routes') or diag($@);
# a second egress server with the other registries (same http{} part)
ok(eval { $t->render_routes(name => 'routes2', SMCP_REGISTRIES => 'crates,rubygems,debian',
                            CRATES_INDEX_URL => $crates->url . '/index',
                            CRATES_DL_URL => $crates->url . '/dl',
                            RUBYGEMS_URL => $gems->url,
                            DEBIAN_MIRROR_URL => $deb->url) },
   '... and crates, rubygems, debian') or diag($@);
my $eport2 = $t->free_port;
unlike($t->read_file('routes.conf'), qr/private-REAL/,
       'the private credential is not in the rendered config');

# a third with npm in front of an Artifactory-like stand-in (below)
my $art = SMCP::Fakes::start_static(root => "$dir/art", kind => 'artifactory',
                                    artifactory => 1);
my $eport3 = $t->free_port;
my $art_cred = 'Basic ' . MIME::Base64::encode_base64('admin:art-REAL-' . rhex(), '');
{
    my $up = $art->url . '/api/npm/npm-remote';
    spew("$dir/art/api/npm/npm-remote/smcp-art/index.json", json_encode({
        name => 'smcp-art', versions => { '1.0.0' => { name => 'smcp-art', version => '1.0.0',
            dist => { tarball => "$up/smcp-art/-/smcp-art-1.0.0.tgz" } } } }));
    spew("$dir/art/api/security/apiKey", '{"apiKey":"AKC-operator-REAL"}');
    $t->render_routes(name => 'routes3', SMCP_REGISTRIES => 'npm',
                      NPM_REGISTRY_URL => $up, NPM_REGISTRY_AUTH => $art_cred);
}
# read by the nginx master at start (routes.conf was rendered without it)
$ENV{NPM_REGISTRY_AUTH} = $art_cred;

$t->start(http => egress_server_conf("127.0.0.1:$eport")
                 . "    server {\n        listen 127.0.0.1:$eport2;\n"
                 . "        include %%DIR%%/routes2.conf;\n    }\n"
                 . "    server {\n        listen 127.0.0.1:$eport3;\n"
                 . "        include %%DIR%%/routes3.conf;\n    }\n");

my ($run, $tok) = $t->live_run;
my $base = "http://127.0.0.1:$eport";

sub get {
    my ($path, %o) = @_;
    return $t->http(port => $o{port} // $eport, method => $o{method} // 'GET', path => $path,
                    (exists $o{host} ? (host => $o{host}) : ()),
                    headers => [ ($o{anon} ? () : (Authorization => "Bearer $tok")),
                                 @{ $o{headers} // [] } ],
                    body => $o{body}, timeout => 20);
}

###############################################################################
# the token is required

egress_error_ok(get('/registry/npm/smcp-pad', anon => 1), 401, 'npm without a token');
is(seen($npm, '/smcp-pad'), 0, '... nothing reached the registry');

###############################################################################
# npm: packument rewritten, tarball cached

{
    my $r = get('/registry/npm/smcp-pad', headers => [ 'Accept-Encoding' => 'gzip' ]);
    is($r->{status}, 200, 'npm: the packument');
    my $j = json_decode($r->{body});
    is($j && $j->{versions}{'1.0.0'}{dist}{tarball},
       "$base/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz",
       'npm: the tarball URL names the egress, not the upstream');
    my $up = $npm->last_request(path => '/smcp-pad');
    ok($up, 'npm: the registry saw /smcp-pad');
    ok(!defined $up->{headers}{'accept-encoding'},
       '... asked for no compression (the body is rewritten)');
    ok(!grep({ index($_->[1], $tok) >= 0 } @{ $up->{header_list} }),
       '... and never saw the run token');
    ok(!defined $r->{headers}{'set-cookie'}, 'npm: no upstream cookie reaches the sandbox');

    my $want = slurp("$dir/npm/smcp-pad/-/smcp-pad-1.0.0.tgz");
    for my $n (1 .. 3) {
        my $t2 = get('/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz');
        is($t2->{status}, 200, "npm: tarball, fetch $n");
        ok($t2->{body} eq $want, "... the upstream's bytes");
    }
    is(seen($npm, '/smcp-pad/-/smcp-pad-1.0.0.tgz'), 1,
       'npm: the registry saw the tarball once (Cache-Control: no-cache ignored)');
    is(get('/registry/npm/smcp-pad', method => 'HEAD')->{status}, 200, 'npm: HEAD');
}

###############################################################################
# hostile: a Host of the sandbox's choosing changes only its own answer
# (the cache keeps the upstream's bytes); dot segments stay inside the
# route

{
    my $r = get('/registry/npm/smcp-pad', host => 'evil.example');
    like($r->{body}, qr{"http://evil\.example/registry/npm/smcp-pad/-/}, 'npm: a forged Host is '
         . 'written into its own answer only');
    $r = get('/registry/npm/smcp-pad');
    like($r->{body}, qr{"\Q$base\E/registry/npm/smcp-pad/-/}, '... the next answer names the egress');
    unlike($r->{body}, qr/evil/, '... nothing of the forged one (the cache keeps upstream bytes)');
    for my $p ('/registry/npm/%2e%2e/%2e%2e/anthropic/v1/messages', '/registry/npm/../github/x') {
        my $x = get($p);
        isnt($x->{status}, 200, "npm: $p is not served");
    }
    ok(!grep({ $_->{path} =~ /\.\./ } @{ $npm->requests }), '... nor sent upstream with dot segments');
}

###############################################################################
# hostile: an npm route in front of a registry on Tomcat or Jetty (an
# Artifactory-like stand-in: "..;" is "..", X-Forwarded-Host and its
# base-URL override build the URLs it serves, Accept: text/html gets
# HTML), with the operator's credential: no path leaves the route's
# prefix, and nothing one run sends changes what the cache keeps for all

{
    my %o = (port => $eport3);
    my $b3 = "http://127.0.0.1:$eport3";
    my $r = get('/registry/npm/smcp-art', %o);
    is($r->{status}, 200, 'artifactory: the packument (control)');
    like($r->{body}, qr{"\Q$b3\E/registry/npm/smcp-art/-/}, '... naming the egress');

    for my $p ('/registry/npm/..;/..;/..;/api/security/apiKey',
               '/registry/npm/smcp-art/..;/..;/..;/..;/api/security/apiKey',
               '/registry/npm/%2e%2e;/%2e%2e;/%2e%2e;/api/security/apiKey',
               '/registry/npm/..%3b/..%3b/..%3b/api/security/apiKey',
               '/registry/npm/smcp-art;x=1', '/registry/npm/%2e/smcp-art',
               '/registry/npm/..%5c..%5capi', '/registry/npm/..\\..\\api',
               '/registry/npm//smcp-art', '/registry/npm/@s%2f..') {
        egress_error_ok(get($p, %o), 400, "artifactory: $p is refused",
                        message => qr/path refused/);
    }
    # nginx resolves these outside the route itself (403 there)
    for my $p ('/registry/npm/.%2e/x', '/registry/npm/a%2f..%2f..%2fx') {
        like(get($p, %o)->{status}, qr/^40[03]$/, "artifactory: $p is refused");
    }
    ok(!grep({ $_->{target} =~ /;|%2e|%5c|\\/i || $_->{path} =~ m{^/api/security} }
             @{ $art->requests }),
       '... and none reached the registry: it never answered with the operator\'s key')
        or diag(join "\n", map { $_->{target} } @{ $art->requests });
    is(get('/registry/npm/@types%2fnode', %o)->{status}, 404,
       'an npm scope (@scope%2fname) passes the check (the registry has none: 404)');

    # a run's headers do not reach the registry, so they cannot poison
    # what every run gets from the cache
    $r = get('/registry/npm/smcp-art', %o, headers => [
        'X-Forwarded-Host' => 'evil.example', 'X-Forwarded-Proto' => 'https',
        'X-Artifactory-Override-Base-Url' => 'https://evil.example/art',
        'Cache-Control' => 'no-cache', Pragma => 'no-cache' ]);
    is($r->{status}, 200, 'artifactory: X-Forwarded-Host and the base-URL override sent');
    unlike($r->{body}, qr/evil/, '... have no effect on the answer');
    my ($run2, $tok2) = $t->live_run;
    $r = $t->http(port => $eport3, path => '/registry/npm/smcp-art?write=1',
                  headers => [ Authorization => "Bearer $tok",
                               'X-Forwarded-Host' => 'evil.example' ]);
    $r = $t->http(port => $eport3, path => '/registry/npm/smcp-art?write=1',
                  headers => [ Authorization => "Bearer $tok2" ]);
    unlike($r->{body}, qr/evil/, '... nor on what another run gets from the cache');
    like($r->{body}, qr{"\Q$b3\E/registry/npm/smcp-art/-/}, '... which names the egress');

    $r = get('/registry/npm/smcp-art?accept=1', %o, headers => [ Accept => 'text/html' ]);
    $r = $t->http(port => $eport3, path => '/registry/npm/smcp-art?accept=1',
                  headers => [ Authorization => "Bearer $tok2", Accept => 'application/json' ]);
    like($r->{body}, qr/^\{/, "artifactory: a run's Accept: text/html is not what another "
         . 'run gets from the cache (JSON, not the HTML variant)');
    $r = get('/registry/npm/smcp-art?accept=2', %o,
             headers => [ Accept => 'application/vnd.npm.install-v1+json' ]);
    like($art->last_request(path => '/api/npm/npm-remote/smcp-art')->{headers}{accept} // '',
         qr{^application/vnd\.npm\.install-v1\+json}, "npm's abbreviated Accept still reaches it");

    my %allowed = map { $_ => 1 } qw(host accept user-agent authorization);
    my @extra = sort grep { !$allowed{$_} }
                map { lc $_->[0] } map { @{ $_->{header_list} } } @{ $art->requests };
    is("@extra", '', 'artifactory: the registry saw only Host, Accept, User-Agent and '
       . 'the credential');
    is($art->last_request->{headers}{authorization}, $art_cred, '... the operator\'s');
}

###############################################################################
# PyPI: simple page rewritten to the files route; the wheel cached

{
    my $r = get('/registry/pypi/simple/smcp-demo/');
    is($r->{status}, 200, 'pypi: the simple page');
    like($r->{body}, qr{href="\Q$base\E/registry/pypi/files/packages/ab/\Q$wheel\E#sha256=[0-9a-f]{64}"},
         'pypi: the file link names the egress files route');
    unlike($r->{body}, qr{\Q${\ $files->url }\E}, '... and not the files host');
    ok(!defined $r->{headers}{'content-length'}
       || $r->{headers}{'content-length'} == length($r->{body}),
       'pypi: a rewritten body has no stale Content-Length');
    my $want = slurp("$dir/files/packages/ab/$wheel");
    for my $n (1 .. 2) {
        my $w = get("/registry/pypi/files/packages/ab/$wheel");
        ok($w->{status} == 200 && $w->{body} eq $want, "pypi: the wheel, fetch $n");
    }
    is(seen($files, "/packages/ab/$wheel"), 1,
       'pypi: the files host saw the wheel once');
}

###############################################################################
# Go: path-based, cached

{
    for my $f ('list', 'v1.0.0.info', 'v1.0.0.mod', 'v1.0.0.zip', 'v1.0.0.zip') {
        my $r = get("/registry/go/example.com/m/\@v/$f");
        ok($r->{status} == 200 && $r->{body} eq slurp("$dir/go/example.com/m/\@v/$f"),
           "go: \@v/$f");
    }
    is(seen($goproxy, '/example.com/m/@v/v1.0.0.zip'), 1,
       'go: the proxy saw the zip once');
    is(get('/registry/go/example.com/nope/@v/list')->{status}, 404, 'go: a 404 passes as 404');
}

###############################################################################
# a private registry: its credential, never the token

{
    my $r = get('/registry/maven/org/x/lib/1.0/lib-1.0.jar');
    is($r->{status}, 200, 'maven: a jar from the private registry');
    my $up = $maven->last_request;
    is($up && $up->{headers}{authorization}, $private,
       'maven: the registry saw its credential');
    ok($up && !grep({ index($_->[1], $tok) >= 0 } @{ $up->{header_list} }),
       '... and not the run token');
}

###############################################################################
# read-only: publishing is refused after the token check, audited

{
    my $before = seen($npm);
    for my $m ('PUT', 'POST', 'DELETE', 'PATCH') {
        egress_error_ok(get('/registry/npm/smcp-pad', method => $m, body => '{}',
                            headers => [ 'Content-Type' => 'application/json' ]),
                        405, "npm: $m", message => qr/read-only/);
    }
    egress_error_ok(get('/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz', method => 'PUT',
                        body => 'x'), 405, 'npm: PUT of a tarball');
    egress_error_ok(get('/registry/pypi/files/packages/ab/x.whl', method => 'POST',
                        body => 'x'), 405, 'pypi: POST (an upload)');
    is(seen($npm), $before, 'npm: no write reached the registry');
}

###############################################################################
# crates (config.json rewritten, downloads cached), rubygems, debian

{
    my %o = (port => $eport2);
    my $r = get('/registry/crates/index/config.json', %o);
    is($r->{status}, 200, 'crates: config.json');
    my $j = json_decode($r->{body}) // {};
    is($j->{dl}, "http://127.0.0.1:$eport2/registry/crates/dl",
       'crates: dl names the egress download route');
    ok($j->{'auth-required'}, 'crates: auth-required (cargo sends its token)');
    like(get('/registry/crates/index/sm/cd/smcp-demo', %o)->{body}, qr/"vers":"1.0.0"/,
         'crates: an index file');
    for my $n (1, 2) {
        is(get('/registry/crates/dl/smcp-demo/1.0.0/download', %o)->{body},
           slurp("$dir/crates/dl/smcp-demo/1.0.0/download"), "crates: a crate, fetch $n");
        is(get('/registry/rubygems/gems/smcp-1.0.gem', %o)->{body},
           slurp("$dir/gems/gems/smcp-1.0.gem"), "rubygems: a gem, fetch $n");
        is(get('/registry/debian/debian/pool/main/s/smcp/smcp_1.0_all.deb', %o)->{body},
           slurp("$dir/deb/debian/pool/main/s/smcp/smcp_1.0_all.deb"), "debian: a .deb, fetch $n");
    }
    is(join(',', seen($crates, '/dl/smcp-demo/1.0.0/download'),
            seen($gems, '/gems/smcp-1.0.gem'),
            seen($deb, '/debian/pool/main/s/smcp/smcp_1.0_all.deb')), '1,1,1',
       'crates, rubygems, debian: each file fetched upstream once');
    is(get('/registry/debian/debian/dists/bookworm/InRelease', %o)->{status}, 200,
       'debian: dists');
    egress_error_ok(get('/registry/npm/smcp-pad', %o), 403, 'npm on the other server (not enabled)',
                    message => qr/crates,rubygems,debian/);
    egress_error_ok(get('/registry/rubygems/api/v1/gems', %o, method => 'POST', body => 'x'),
                    405, 'rubygems: a push');
}

###############################################################################
# registries not enabled, unknown registries

egress_error_ok(get('/registry/crates/index/config.json'), 403,
                'crates (not enabled)', message => qr/not enabled/);
egress_error_ok(get('/registry/rubygems/gems/x.gem'), 403, 'rubygems (not enabled)');
egress_error_ok(get('/registry/cpan/x'), 403, 'an unknown registry');

###############################################################################
# audit: route, path, status, bytes, cache

{
    # audit records are written at the log phase, after the answer: wait
    # for the last request's
    my $last = sub { grep { ($_->{json}{path} // '') eq '/registry/rubygems/api/v1/gems' } @_ };
    wait_until(30, sub { $last->($t->run_events($run, type => 'egress')) });
    my @eg = map { $_->{json} } $t->run_events($run, type => 'egress');
    my @tgz = grep { $_->{path} eq '/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz'
                     && $_->{method} eq 'GET' } @eg;
    is(scalar @tgz, 3, 'audit: the three tarball fetches');
    # the workers write their records independently: the stream's order
    # need not be the requests' (the upstream count shows the first missed)
    is(join(',', sort map { $_->{cache} // 'none' } @tgz), 'hit,hit,miss',
       'audit: one cache miss and two hits');
    ok(!grep({ $_->{route} ne 'registry-npm' || $_->{status} != 200 || !$_->{granted} } @tgz),
       'audit: route registry-npm, status 200, granted');
    my $len = length slurp("$dir/npm/smcp-pad/-/smcp-pad-1.0.0.tgz");
    ok(!grep({ $_->{bytesOut} < $len } @tgz), 'audit: bytesOut, the tarball and headers');
    my @put = grep { $_->{method} eq 'PUT' } @eg;
    ok(@put >= 2 && !grep({ $_->{status} != 405 || $_->{granted} } @put),
       'audit: refused writes recorded (405, not granted)');
    ok((grep { $_->{route} eq 'registry-go' && ($_->{cache} // '') eq 'hit' } @eg),
       'audit: go cache hit');
    ok((grep { $_->{route} eq 'registry-pypi-simple' && ($_->{cache} // '') eq 'miss' } @eg),
       'audit: pypi simple miss');
    my $all = join "\n", map { json_encode($_) } @eg;
    unlike($all, qr/\Q$tok\E|private-REAL/, 'audit: no token, no credential');
}

###############################################################################
# the cache is shared by runs: another run's fetch is a hit

{
    my ($run2, $tok2) = $t->live_run;
    my $r = $t->http(port => $eport, path => '/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz',
                     headers => [ Authorization => "Bearer $tok2" ]);
    is($r->{status}, 200, 'another run: the tarball');
    # the audit record is written at the log phase, after the answer
    wait_until(30, sub { $t->run_events($run2, type => 'egress') });
    my ($e) = map { $_->{json} } $t->run_events($run2, type => 'egress');
    is($e && $e->{cache}, 'hit', "another run: served from the shared cache");
    is(seen($npm, '/smcp-pad/-/smcp-pad-1.0.0.tgz'), 1,
       '... the registry still saw it once');
}

{
    my $logs = $t->read_file('error.log') . $t->read_file('access.log');
    unlike($logs, qr/\Q$tok\E|private-REAL/, 'logs: no token, no credential');
}

$_->stop for ($art, $npm, $pypi, $files, $goproxy, $maven, $crates, $gems, $deb);
$t->done;
