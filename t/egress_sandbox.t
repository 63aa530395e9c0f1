#!/usr/bin/perl

# The egress proxy end to end, from inside a real sandbox: real dockerd, a
# hardened container on a runner/sandbox-net network whose main process is
# runner/sandbox/entrypoint.sh, real nginx with the module serving the routes
# printed by ngx_sandbox_mcp_module/conf/egress-routes.sh (the routes that
# ship), real Redis holding a live run; only the upstreams are fakes
# (t/lib/SMCP/Fakes.pm: Anthropic, OpenAI-compatible, GitHub git + REST).
#
# The sandbox holds only its run token.  Checked: model calls (streamed,
# chunk by chunk) reach the upstream with the REAL key and never the run
# token; refusals are readable JSON with the right status; git clone and
# push and a pull request go through the GitHub routes; no real secret is
# anywhere inside the sandbox; every proxied request is audited in the run's
# event stream; nginx's logs hold no key and no token.
#
# Needs root and Docker (.ci/install-deps, .ci/start-dockerd; the base image
# is built on first use).  Outside CI a missing engine is a skip.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(make_path);
use File::Temp qw(tempdir);
use IO::Socket::INET;
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Test qw(json_decode json_encode wait_until rhex slurp free_port
                  egress_routes_script egress_error_ok egress_server_conf);
use SMCP::Docker qw(:all);
use SMCP::Fakes qw(parse_sse);

my $T0 = time();
my $ENTRYPOINT = SMCP::Test::repo_root() . '/runner/sandbox/entrypoint.sh';
my $REGISTRIES = SMCP::Test::repo_root() . '/runner/sandbox/registries.sh';
my $GIT_AFTER = SMCP::Test::repo_root() . '/runner/sandbox/git-after.sh';
my $AGENTS = SMCP::Test::repo_root() . '/runner/sandbox/agents.sh';

# nginx + redis (skips when the module is not built), then Docker
my $t = SMCP::Test->new(workers => 2);
ensure_docker(root => 1);

##############################################################################
# the network, the fakes, the routes, nginx

my $egress_port = free_port('0.0.0.0');
my $net = sandbox_net_up(egress_port => $egress_port);
my $gw = $net->{gateway};
my $EGRESS = "http://$gw:$egress_port";
note("sandbox network $net->{name} ($net->{subnet}), egress $EGRESS");

# real-looking, unique credentials: only nginx's master ever reads them
my %REAL = (
    anthropic => 'sk-ant-REAL-' . rhex(20),
    compat    => 'sk-compat-REAL-' . rhex(20),
    github    => 'ghp_REAL' . rhex(18),
);
my $REAL_GIT_BASIC = encode_base64("x-access-token:$REAL{github}", '');
my @SECRETS = (values(%REAL), $REAL_GIT_BASIC);

my $CHUNK_DELAY = 0.4;
my $ANT_TEXT = 'Streamed through the egress proxy, one delta at a time.';
my $ant = SMCP::Fakes::start_anthropic(key => $REAL{anthropic},
    chunk_delay => $CHUNK_DELAY, deltas => 4, text => $ANT_TEXT);
my $oai = SMCP::Fakes::start_openai(key => $REAL{compat}, deltas => 3,
    text => 'Hello from the compatible server.');
my $gh = SMCP::Fakes::start_github(token => $REAL{github});
my $base_sha = $gh->create_repo('owner/repo', files => {
    'README.md' => "# repo\n", 'src/main.c' => "int main(void) { return 0; }\n" });
$gh->create_repo('other/repo');    # reachable upstream: a 403 is the proxy's

# the credentials in the environment of the routes script and of nginx's
# master (env:NAME is read at start); no other provider's route
delete @ENV{qw(OPENAI_API_KEY OPENAI_BASE_URL AZURE_OPENAI_API_KEY
               AZURE_OPENAI_BASE_URL GOOGLE_API_KEY GOOGLE_BASE_URL
               CF_AIG_TOKEN CF_AIG_BASE_URL)};
%ENV = (%ENV,
    ANTHROPIC_API_KEY => $REAL{anthropic}, ANTHROPIC_BASE_URL => $ant->url,
    COMPAT_API_KEY    => $REAL{compat},    COMPAT_BASE_URL    => $oai->url,
    GITHUB_TOKEN      => $REAL{github},    GITHUB_URL         => $gh->url,
    GITHUB_API_URL    => $gh->url,
);
{
    my ($rc, $out, $err) = run_cmd(['bash', egress_routes_script()], timeout => 30);
    is($rc, 0, 'egress-routes.sh renders the routes') or diag($err);
    for my $r (qw(anthropic compat github github-api)) {
        like($out, qr/^\s*sandbox_mcp_egress \Q$r\E;/m, "... with the $r route");
    }
    unlike($out, qr/\Q$_\E/, '... naming credentials, not holding them')
        for values %REAL;
    ok(eval { $t->render_routes }, '... written for nginx') or diag($@);
}
$t->start(http => egress_server_conf("$gw:$egress_port"));

# a live run of alice on owner/repo, and its egress token
my ($run_id, $tok) = $t->live_run(repository => 'https://github.com/owner/repo',
                                  create_pr => 1, createdAt => int(time() * 1000));
my $RUN_KEY = "smcp:run:$run_id";
my $TOK_BASIC = encode_base64("x-access-token:$tok", '');
my %BAD_TOK = (
    forged  => $t->token(sub => 'alice', scope => 'egress', run => $run_id,
                         exp => int(time()) + 600, secret => 'not-the-secret-' . rhex(16)),
    expired => $t->token(sub => 'alice', scope => 'egress', run => $run_id,
                         exp => int(time()) - 60, iat => int(time()) - 700),
    mcp     => $t->token(sub => 'alice', scope => 'mcp', run => $run_id, exp => int(time()) + 600),
);
my @TOKENS = ($tok, $TOK_BASIC, values %BAD_TOK);

##############################################################################
# the sandbox: hardened container, entry script as its main process

my $vol = create_volume();
my $cid = create_container(
    sandbox     => 1,
    network     => $net->{name},
    dns         => [$gw],
    dns_options => ['timeout:1', 'attempts:1'],
    memory      => '512m',
    pids_limit  => 256,
    env         => {
        HOME            => '/home/sandbox',
        SMCP_EGRESS_URL => $EGRESS,
        SMCP_RUN_TOKEN  => $tok,
        SMCP_RUN_ID     => $run_id,
        SMCP_MODEL      => 'anthropic/claude-sonnet-4-5',
        SMCP_GIT_HOST   => 'github.com',
    },
    entrypoint  => '/usr/local/bin/smcp-entrypoint',
    extra       => ['--mount', "type=volume,src=$vol,dst=/workspace",
                    '--mount', "type=bind,src=$ENTRYPOINT,dst=/usr/local/bin/smcp-entrypoint,readonly",
                    '--mount', "type=bind,src=$REGISTRIES,dst=/usr/local/lib/smcp/registries.sh,readonly",
                    '--mount', "type=bind,src=$GIT_AFTER,dst=/usr/local/lib/smcp/git-after.sh,readonly",
                    '--mount', "type=bind,src=$AGENTS,dst=/usr/local/lib/smcp/agents.sh,readonly"],
    cmd         => ['sleep', '300'],
);
{
    # a fresh volume's root is root's: seed the layout owned by the sandbox
    # user (the recipe's archive PUT on the created container)
    my $seed = tempdir('smcp-seed-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    make_path("$seed/repo", "$seed/.oc", { mode => 0755 });
    my ($rc, $tar, $err) = run_cmd(['tar', '-C', $seed, '--owner=1000', '--group=1000',
                                    '--numeric-owner', '-cf', '-', 'repo', '.oc']);
    die "tar: $err" if $rc;
    ($rc, undef, $err) = docker({ stdin => $tar }, 'cp', '-', "$cid:/workspace");
    die "docker cp: $err" if $rc;
}
start_container($cid);
my $ready = wait_until(20, sub {
    my ($rc, $out) = exec_in($cid, ['cat', '/proc/1/cmdline'], timeout => 5);
    return $out =~ /^sleep\x00300/ ? 1 : 0;
}, 0.2);
ok($ready, 'the entry script prepared the sandbox and exec-ed its arguments')
    or diag(join '', (docker('logs', $cid))[1, 2]);
is(container_inspect_field($cid, '{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} '
   . '{{json .HostConfig.CapDrop}} {{json .HostConfig.SecurityOpt}} {{json .HostConfig.Dns}} '
   . '{{.HostConfig.NetworkMode}}'),
   qq(1000:1000 true ["ALL"] ["no-new-privileges"] ["$gw"] $net->{name}),
   'sandbox: user 1000, read-only root, no capabilities, no-new-privileges, Dns=[gateway], sandbox network');

# sh($script, @args, {env => .., stdin => ..}) -> (rc, stdout, stderr): bash
###############################################################################
# the host's Redis, listening on every address: the sandbox cannot reach it

{
    my $rport = $t->free_port;
    my $rdir = $t->dir . '/host-redis';
    mkdir $rdir;
    my $rpid = fork_child(sub {
        exec('redis-server', '--port', $rport, '--bind', '0.0.0.0',
             '--protected-mode', 'no', '--save', '', '--dir', $rdir,
             '--logfile', "$rdir/redis.log")
            or exit 127;
    });
    ok(wait_until(10, sub {
        my $c = IO::Socket::INET->new(PeerAddr => "$gw:$rport", Timeout => 1);
        return 0 unless $c;
        print $c "PING\r\n";
        my $l = <$c>;
        return defined $l && $l =~ /^\+PONG/;
    }), "host Redis on 0.0.0.0:$rport answers PING on the gateway address (control)");
    my ($rc) = exec_in($cid, ['bash', '-c',
        "exec 3<>/dev/tcp/$gw/$rport && echo PING >&3 && head -c 5 <&3"],
        timeout => 10);
    isnt($rc, 0, "sandbox: the host's Redis on $gw:$rport is unreachable");
    my ($rc2) = exec_in($cid, ['bash', '-c',
        "exec 3<>/dev/tcp/$gw/$egress_port"], timeout => 10);
    is($rc2, 0, '... while the egress port on the same address is reachable');
    stop_child($rpid);
}

# inside the sandbox, with the container's own environment
sub sh {
    my ($script, @args) = @_;
    my %o = ref $args[-1] eq 'HASH' ? %{ pop @args } : ();
    return exec_in($cid, ['bash', '-c', $script, 'sh', @args],
                   timeout => $o{timeout} // 30, %o);
}

# curl_in(method, path, [header words (bash, double-quoted)], body, env)
#   -> {status, headers => {lc => v}, body, json, rc, err}
my $CURL_SH = <<'SH';
m=$1 p=$2; shift 2
code=$(curl -sS --max-time 20 -o /tmp/c.body -D /tmp/c.head -w '%{http_code}' -X "$m" "$@" "$SMCP_EGRESS_URL$p") || exit $?
printf '%s\n' "$code"; cat /tmp/c.head; printf -- '--BODY--\n'; cat /tmp/c.body
SH
sub curl_in {
    my ($method, $path, $headers, $body, $env) = @_;
    # header words are expanded by bash: "x-api-key: $SMCP_RUN_TOKEN"
    my $script = "set -- \"\$1\" \"\$2\" " . join(' ', map { "-H $_" } @{ $headers || [] })
               . (defined $body ? ' --data-binary @-' : '') . "\n" . $CURL_SH;
    my ($rc, $out, $err) = sh($script, $method, $path,
        { env => $env || {}, (defined $body ? (stdin => $body) : ()) });
    my %r = (rc => $rc, err => $err, status => 0, headers => {}, body => '');
    if ($rc == 0 && $out =~ /\A(\d{3})\n(.*?)--BODY--\n(.*)\z/s) {
        @r{qw(status body)} = ($1, $3);
        for (split /\r?\n/, $2) {
            $r{headers}{lc $1} = $2 if /^([^:\s]+):\s*(.*?)\s*$/;
        }
        $r{json} = json_decode($r{body});
    }
    return \%r;
}

# the headers of every request a fake saw that contain $needle
sub headers_with {
    my ($fake, $needle) = @_;
    my @hits;
    for my $req ($fake->requests) {
        for my $h (@{ $req->{header_list} || [] }) {
            push @hits, "$req->{method} $req->{target}: $h->[0]: $h->[1]"
                if index($h->[1], $needle) >= 0;
        }
    }
    return @hits;
}

##############################################################################
# a) + b) model APIs through the proxy, streamed chunk by chunk

{
    my $body = json_encode({ model => 'claude-sonnet-4-5', max_tokens => 64, stream => JSON::PP::true,
                             messages => [{ role => 'user', content => 'hello' }] });
    my $script = <<'SH';
curl -sS -N --max-time 30 -D /tmp/sse.head \
    -H "x-api-key: $SMCP_RUN_TOKEN" -H 'anthropic-version: 2023-06-01' \
    -H 'content-type: application/json' --data-binary "$1" \
    "$SMCP_EGRESS_URL/anthropic/v1/messages" |
while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "${line%$'\r'}"; done
printf -- '--RC %s--\n' "${PIPESTATUS[0]}"
cat /tmp/sse.head
SH
    my ($rc, $out, $err) = sh($script, $body, { timeout => 40 });
    my ($lines, $curl_rc, $head) = $out =~ /\A(.*)--RC (\d+)--\n(.*)\z/s;
    is($curl_rc, 0, 'anthropic: curl from inside the sandbox succeeds') or diag("$rc $out $err");
    like($head // '', qr{^HTTP/1\.1 200}, '... 200');
    like($head // '', qr{^content-type: text/event-stream}mi, '... an event stream');
    my (@stamped, $sse);
    for (split /\n/, $lines // '') {
        my ($ts, $l) = /^(\d+\.\d+) (.*)$/ or next;
        push @stamped, [$ts, $l];
        $sse .= "$l\n";
    }
    my @ev = parse_sse($sse);
    my @names = map { $_->{event} // '' } @ev;
    is_deeply([@names[0, 1], @names[-3 .. -1]],
              [qw(message_start content_block_start content_block_stop message_delta message_stop)],
              '... the Messages API events, in order') or diag(join ' ', @names);
    is(join('', map { $_->{json}{delta}{text} // '' }
                grep { ($_->{event} // '') eq 'content_block_delta' } @ev),
       $ANT_TEXT, '... carrying the model text');
    my @ets = map { $_->[0] } grep { $_->[1] =~ /^event: / } @stamped;
    my $spread = @ets ? $ets[-1] - $ets[0] : 0;
    ok(@ets >= 8 && $ets[0] < $ets[-1] - 2 * $CHUNK_DELAY,
       sprintf('b) streamed: %d events, the first %.2f s before the last (upstream: %.1f s apart)',
               scalar(@ets), $spread, $CHUNK_DELAY))
        or diag(join "\n", map { "@$_" } @stamped);
    my @gaps = map { $ets[$_] - $ets[$_ - 1] } 1 .. $#ets;
    my $spaced = grep { $_ > $CHUNK_DELAY / 2 } @gaps;
    cmp_ok($spaced, '>=', @gaps / 2, '... events arrive spaced out, not in one burst')
        or diag(join ' ', map { sprintf '%.3f', $_ } @gaps);

    my @reqs = $ant->requests(path => '/v1/messages');
    is(scalar(@reqs), 1, 'the fake Anthropic API got the request');
    my $r = $reqs[0] // {};
    is($r->{headers}{'x-api-key'}, $REAL{anthropic}, '... with the REAL key in x-api-key');
    is($r->{status}, 200, '... and answered 200');
    ok(!exists $r->{headers}{authorization}, '... no Authorization header');
    is($r->{stream}, 1, '... a streaming request');
    is_deeply([headers_with($ant, $tok)], [], '... the run token is in no header it saw');
}

{
    my $body = json_encode({ model => 'qwen3-coder', stream => JSON::PP::true,
                             messages => [{ role => 'user', content => 'hello' }] });
    my $r = curl_in('POST', '/compat/v1/chat/completions',
                            ['"Authorization: Bearer $SMCP_RUN_TOKEN"', '"content-type: application/json"'],
                    $body);
    is($r->{status}, 200, 'compat: chat completion through the proxy: 200') or diag(explain $r);
    like($r->{headers}{'content-type'} // '', qr{text/event-stream}, '... streamed');
    my @ev = parse_sse($r->{body});
    is(@ev ? $ev[-1]{data} : '', '[DONE]', '... ending with [DONE]');
    is(join('', map { $_->{json}{choices}[0]{delta}{content} // '' } grep { $_->{json} } @ev),
       'Hello from the compatible server.', '... carrying the text');
    my @reqs = $oai->requests(path => '/v1/chat/completions');
    is(scalar(@reqs), 1, 'the fake compatible server got the request');
    is($reqs[0]{headers}{authorization}, "Bearer $REAL{compat}", '... with Bearer <REAL key>');
    is_deeply([headers_with($oai, $tok)], [], '... the run token is in no header it saw');
}

##############################################################################
# c) refusals: readable JSON, right status, nothing reaches an upstream

my %fake_count = map { $_->kind => scalar(@{ $_->requests }) } $ant, $oai, $gh;

{
    my $msg = json_encode({ model => 'claude-sonnet-4-5', max_tokens => 8,
                            messages => [{ role => 'user', content => 'x' }] });
    my @ct = ('"content-type: application/json"');
    egress_error_ok(curl_in('POST', '/anthropic/v1/messages', \@ct, $msg),
                    401, 'c) no token', type => 'authentication_error');
    egress_error_ok(curl_in('POST', '/anthropic/v1/messages', ['"x-api-key: $TOK"', @ct], $msg,
                            { TOK => $BAD_TOK{forged} }),
                    401, 'c) forged token (another secret)', type => 'authentication_error');
    egress_error_ok(curl_in('POST', '/anthropic/v1/messages', ['"x-api-key: $TOK"', @ct], $msg,
                            { TOK => $BAD_TOK{expired} }),
                    401, 'c) expired token', type => 'authentication_error');
    egress_error_ok(curl_in('POST', '/anthropic/v1/messages', ['"x-api-key: $TOK"', @ct], $msg,
                            { TOK => $BAD_TOK{mcp} }),
                    401, 'c) token of scope mcp', type => 'authentication_error');

    $t->redis('HSET', $RUN_KEY, status => 'completed');
    egress_error_ok(curl_in('POST', '/anthropic/v1/messages', ['"x-api-key: $SMCP_RUN_TOKEN"', @ct], $msg),
                    401, 'c) the run completed: the same valid token', type => 'authentication_error');
    egress_error_ok(curl_in('GET', '/github/owner/repo.git/info/refs?service=git-upload-pack',
                            ['"Authorization: Basic $(printf x-access-token:%s "$SMCP_RUN_TOKEN" | base64 -w0)"']),
                    401, 'c) ... and for git');
    $t->redis('HSET', $RUN_KEY, status => 'running');

    egress_error_ok(curl_in('GET', '/nope', ['"Authorization: Bearer $SMCP_RUN_TOKEN"']),
                    404, 'c) unknown route /nope');
    egress_error_ok(curl_in('GET', '/github/owner/repo.git/objects/info/packs',
                            ['"Authorization: Bearer $SMCP_RUN_TOKEN"']),
                    403, 'c) git path outside smart HTTP (objects/info/packs)', type => 'permission_error');
    egress_error_ok(curl_in('GET', '/github/other/repo.git/info/refs?service=git-upload-pack',
                            ['"Authorization: Basic $(printf x-access-token:%s "$SMCP_RUN_TOKEN" | base64 -w0)"']),
                    403, 'c) another repository (other/repo info/refs)', type => 'permission_error');
    egress_error_ok(curl_in('GET', '/github-api/repos/other/repo',
                            ['"Authorization: Bearer $SMCP_RUN_TOKEN"']),
                    403, 'c) another repository through the REST route', type => 'permission_error');
    egress_error_ok(curl_in('GET', '/github-api/user', ['"Authorization: Bearer $SMCP_RUN_TOKEN"']),
                    403, 'c) REST path outside the allow-list (/github-api/user)', type => 'permission_error');

    my $r = curl_in('POST', '/anthropic/v1/messages', ['"x-api-key: $SMCP_RUN_TOKEN"', @ct], $msg);
    is($r->{status}, 200, 'the run is running again: the token works again') or diag(explain $r);
    $fake_count{anthropic}++;

    is_deeply({ map { $_->kind => scalar(@{ $_->requests }) } $ant, $oai, $gh }, \%fake_count,
              'no refused request reached an upstream');
    is_deeply([grep { ($_->{repo} // '') eq 'other/repo' || $_->{path} eq '/user' } $gh->requests],
              [], '... the fake GitHub never saw other/repo or /user');
}

##############################################################################
# d) git clone and push, and a pull request, through the GitHub routes

my $head_sha;
{
    my $git_env = { GIT_TERMINAL_PROMPT => 0 };
    my ($rc, $out, $err) = sh('git clone --quiet https://github.com/owner/repo.git /workspace/repo'
                            . ' && git -C /workspace/repo log -1 --format=%H',
                              { env => $git_env, timeout => 60 });
    is($rc, 0, 'd) git clone https://github.com/owner/repo.git inside the sandbox') or diag("$out$err");
    is((split /\n/, $out)[-1] // '', $base_sha, '... has the fake repository\'s commit');

    ($rc, $out, $err) = sh(<<'SH', { env => $git_env, timeout => 60 });
set -e
cd /workspace/repo
printf 'changed in the sandbox\n' > CHANGED.md
printf 'int main(void) { return 1; }\n' > src/main.c
git add -A
git commit --quiet -m 'Change from the sandbox'
git push --quiet origin HEAD:refs/heads/opencode/$SMCP_RUN_ID
git rev-parse HEAD
SH
    is($rc, 0, '... commit and git push origin HEAD:refs/heads/opencode/<runId>') or diag("$out$err");
    ($head_sha) = $out =~ /^([0-9a-f]{40})$/m;
    ok($head_sha && $head_sha ne $base_sha, '... a new commit');
    is($gh->ref_commit('owner/repo', "opencode/$run_id"), $head_sha,
       'the fake\'s bare repository has branch opencode/<runId> at the pushed commit');
    is($gh->file_content('owner/repo', "opencode/$run_id", 'CHANGED.md'), "changed in the sandbox\n",
       '... with the new file');
    is($gh->ref_commit('owner/repo', 'main'), $base_sha, '... main untouched');

    my @git = grep { ($_->{repo} // '') eq 'owner/repo' && defined $_->{service} } $gh->requests;
    my %svc = map { $_->{service} => 1 } @git;
    ok($svc{'git-upload-pack'} && $svc{'git-receive-pack'}, 'the fake saw upload-pack and receive-pack')
        or diag(join ' ', sort keys %svc);
    is_deeply([grep { ($_->{headers}{authorization} // '') ne "Basic $REAL_GIT_BASIC"
                      || ($_->{auth} // '') ne 'ok' } @git], [],
              '... every git request with Basic x-access-token:<REAL GitHub token>');

    my $r = curl_in('GET', '/github-api/repos/owner/repo', ['"Authorization: Bearer $SMCP_RUN_TOKEN"']);
    is($r->{status}, 200, 'REST: repository lookup: 200') or diag(explain $r);
    is(ref $r->{json} eq 'HASH' ? $r->{json}{full_name} : '', 'owner/repo', '... owner/repo');

    $r = curl_in('POST', '/github-api/repos/owner/repo/pulls',
                 ['"Authorization: Bearer $SMCP_RUN_TOKEN"', '"Accept: application/vnd.github+json"',
                  '"content-type: application/json"'],
                 json_encode({ title => 'Change from the sandbox', head => "opencode/$run_id",
                               base => 'main', body => 'Opened through the egress proxy.' }));
    is($r->{status}, 201, 'REST: POST /github-api/repos/owner/repo/pulls: 201') or diag(explain $r);
    is(ref $r->{json} eq 'HASH' ? $r->{json}{head}{sha} : '', $head_sha, '... the PR heads the pushed commit');
    my ($pr) = $gh->pulls('owner/repo');
    is($pr ? $pr->{title} : '', 'Change from the sandbox', 'the fake recorded the pull request');
    my ($preq) = $gh->requests(method => 'POST', path => '/repos/owner/repo/pulls');
    is($preq ? $preq->{headers}{authorization} : '', "Bearer $REAL{github}",
       '... sent with Bearer <REAL GitHub token>');

    is_deeply([headers_with($gh, $tok)], [], 'the fake GitHub saw the run token in no header');
    is_deeply([headers_with($gh, $TOK_BASIC)], [], '... nor its Basic form');
}

for my $f ($ant, $oai, $gh) {
    my $log = slurp($f->log_file);
    ok(length($log) && index($log, $tok) < 0 && index($log, $TOK_BASIC) < 0,
       'the ' . $f->kind . ' fake\'s whole request log (headers, bodies) holds no run token');
}

##############################################################################
# e) no real secret inside the sandbox

{
    my $patterns = join("\n", @SECRETS) . "\n";
    my ($rc, $out, $err) = exec_in($cid, ['grep', '-rlF', '-f', '/dev/stdin',
                                          '/workspace', '/home/sandbox', '/tmp'],
                                   stdin => $patterns);
    is($rc, 1, 'e) grep -r /workspace /home/sandbox /tmp: no real key or token anywhere')
        or diag("rc=$rc $out$err");
    ($rc, $out, $err) = exec_in($cid, ['grep', '-rlF', '-f', '/dev/stdin', '/workspace'],
                                stdin => "$tok\n");
    like($out, qr{^/workspace/\.oc/config/opencode/opencode\.json$}m,
         '... while the same grep finds the run token in the OpenCode config (control)')
        or diag("rc=$rc $out$err");
    is(scalar(() = $out =~ m{^/workspace/repo/}mg), 0, '... and not in the worktree');

    my %seen;
    ($rc, $seen{env}) = exec_in($cid, ['env']);
    ($rc, $seen{'/proc/1/environ'}) = exec_in($cid, ['cat', '/proc/1/environ']);
    ($rc, $seen{'~/.gitconfig'}) = exec_in($cid, ['cat', '/home/sandbox/.gitconfig']);
    ($rc, $seen{'opencode.json'}) = exec_in($cid, ['cat',
        '/workspace/.oc/config/opencode/opencode.json']);
    ($rc, $seen{'repo/.git/config'}) = exec_in($cid, ['cat', '/workspace/repo/.git/config']);
    for my $k (sort keys %seen) {
        my @hits = grep { index($seen{$k}, $_) >= 0 } @SECRETS;
        ok(length($seen{$k}) && !@hits, "... $k holds no real key or token") or diag($seen{$k});
    }
    like($seen{env}, qr/^SMCP_RUN_TOKEN=\Q$tok\E$/m, '... env does hold the run token (control)');
    like($seen{'/proc/1/environ'}, qr/(^|\0)SMCP_RUN_TOKEN=\Q$tok\E\0/,
         '... and so does /proc/1/environ');
    like($seen{'/proc/1/environ'}, qr/(^|\0)XDG_CONFIG_HOME=\/workspace\/\.oc\/config\0/,
         '... (the entry script\'s environment)');
    my $oc = json_decode($seen{'opencode.json'});
    my $p = ref $oc eq 'HASH' ? $oc->{provider}{anthropic}{options} : undef;
    is_deeply($p, { baseURL => "$EGRESS/anthropic/v1", apiKey => $tok },
              'the OpenCode config points at the egress route with the run token')
        or diag($seen{'opencode.json'});
    is($oc->{model}, 'anthropic/claude-sonnet-4-5', '... and the model') if ref $oc eq 'HASH';
    like($seen{'~/.gitconfig'}, qr{insteadOf = https://github\.com/}i,
         '~/.gitconfig rewrites github.com ...');
    like($seen{'~/.gitconfig'}, qr{\[url "\Q$EGRESS\E/github/"\]}, '... to the egress route');
    like($seen{'~/.gitconfig'}, qr{extraHeader = Authorization: Basic \Q$TOK_BASIC\E}i,
         '... with the run token as Basic auth');
}

##############################################################################
# f) audit: every proxied request is an `egress` event of the run

{
    my @events;
    wait_until(30, sub {
        @events = map {
            my $e = $_;
            { fields => $e, data => $e->{json},
              raw => join("\0", map { ($_, $e->{$_} // '') } grep { $_ ne 'json' } sort keys %$e) }
        } $t->run_events($run_id, type => 'egress');
        return grep({ ($_->{data}{route} // '') eq 'github-api'
                      && ($_->{data}{method} // '') eq 'POST' } @events) ? 1 : 0;
    });
    ok(scalar(@events), sprintf('f) the run\'s event stream has %d egress events', scalar @events));
    note("egress event: $_->{fields}{data}") for @events;
    my %routes = map { (($_->{data}{route} // '?') => 1) } @events;
    is_deeply([sort keys %routes], [qw(anthropic compat github github-api)],
              '... for every route used') or diag(join ' ', sort keys %routes);
    my @bad = grep {
        my $d = $_->{data};
        !(ref $d eq 'HASH'
          && defined $d->{route} && defined $d->{method} && defined $d->{path}
          && $d->{status} =~ /^\d{3}$/
          && $d->{bytesIn} =~ /^\d+$/ && $d->{bytesOut} =~ /^\d+$/
          && $d->{durationMs} =~ /^\d+$/
          && index($d->{path}, '?') < 0)
    } @events;
    is_deeply(\@bad, [], '... each with route, method, path (no query), status, bytesIn/Out, durationMs')
        or diag(explain \@bad);
    my @leaks = grep { my $raw = $_->{raw}; grep { index($raw, $_) >= 0 } @SECRETS, @TOKENS } @events;
    is_deeply(\@leaks, [], '... none holds any key or token');
    ok(!grep({ $_->{raw} =~ /service=|x-api-key|authorization/i } @events),
       '... nor a query string or a header name');

    my ($sse) = grep { ($_->{data}{route} // '') eq 'anthropic' && $_->{data}{status} == 200 } @events;
    ok($sse && $sse->{data}{method} eq 'POST' && $sse->{data}{path} eq '/anthropic/v1/messages'
       && $sse->{data}{bytesOut} > 500 && $sse->{data}{durationMs} >= 1000 * 2 * $CHUNK_DELAY,
       '... the streamed model call: POST /anthropic/v1/messages, its bytes and duration')
        or diag(explain $sse);
    my ($push) = grep { ($_->{data}{route} // '') eq 'github' && ($_->{data}{path} // '') =~ /git-receive-pack$/
                        && $_->{data}{method} eq 'POST' } @events;
    ok($push && $push->{data}{status} == 200 && $push->{data}{bytesIn} > 100,
       '... the push: POST .../git-receive-pack, 200') or diag(explain [map { $_->{data} } @events]);
    my ($info) = grep { ($_->{data}{route} // '') eq 'github' && ($_->{data}{path} // '') =~ m{/info/refs$} } @events;
    like($info ? $info->{data}{path} : '', qr{^(/github)?/owner/repo\.git/info/refs$},
         '... info/refs recorded without its query string');
    my ($other) = grep { ($_->{data}{path} // '') =~ m{other/repo} && ($_->{data}{route} // '') eq 'github' } @events;
    ok($other && $other->{data}{status} == 403, '... the refused other/repo request too (403)')
        or diag(explain [map { $_->{data} } @events]);
    my ($pr) = grep { ($_->{data}{route} // '') eq 'github-api' && $_->{data}{method} eq 'POST' } @events;
    ok($pr && $pr->{data}{status} == 201, '... the pull request (201)');
}

##############################################################################
# g) nginx's logs hold no key and no token

{
    my $dir = $t->dir;
    for my $f ('error.log', 'access.log') {
        my $log = slurp("$dir/$f");
        ok(length $log, "g) nginx $f is not empty");
        my @hits = grep { index($log, $_) >= 0 } @SECRETS, @TOKENS;
        is(scalar(@hits), 0, "... $f holds no real key and no token");
    }
    like(slurp("$dir/access.log"), qr{"POST /anthropic/v1/messages HTTP/1\.1" 200 },
         'the access log did see the proxied requests (control)');
}

##############################################################################

remove_container($cid);
note(sprintf('test body took %.1f s', time() - $T0));
$t->done;
