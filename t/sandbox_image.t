#!/usr/bin/env perl
# The sandbox image (runner/sandbox/Dockerfile, runner/sandbox/build-image)
# and its entry script, without a model:
#
#   - build-image builds the image quietly; a second call is a no-op (same
#     image id, well under a second); a changed entry script is noticed
#     (content hash label); a tarball failing the pinned integrity is
#     refused with a clear message
#   - the image: labels, user 1000, entry point, pinned OpenCode, which
#     prints its version as uid 1000 under the full lockdown (read-only
#     root, tmpfs /tmp and /home/sandbox, a volume at /workspace, cap-drop
#     ALL, no-new-privileges, network none)
#   - the entry script with arguments writes OpenCode's config (run token
#     and egress base URL, nothing else) and git's, then runs them
#   - without arguments, with a stand-in `opencode` on PATH whose server
#     does not start (the entry script falls back to `opencode run`; the
#     server path is the real OpenCode's, t/runner.t, t/steer.t): the task on
#     stdin, the derived --title, --session, lifecycle lines, the diff of
#     the run (commits included, against the start) as strict JSON whatever
#     the bytes, the exit status, and a stop signal passed on to the agent
#     (agent_exit and the diff still printed); commands the agent put on
#     PATH are not run after it
#
# Needs root and Docker; the first build fetches OpenCode with `npm pack`
# (~60 MB) and takes ~10-30 s, later runs reuse the image.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use JSON::PP;
use MIME::Base64 qw(encode_base64);
use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(:all);
use SMCP::Test qw(repo_root rhex wait_until);

ensure_docker(root => 1);

my $root = repo_root();
my $build = "$root/runner/sandbox/build-image";
my $image = sandbox_image();
my $version = '1.18.33';
my $JSON = JSON::PP->new->canonical;

sub image_field {
    my ($img, $f) = @_;
    my ($rc, $out) = docker('image', 'inspect', '--format', $f, $img);
    return undef if $rc != 0;
    chomp $out;
    return $out;
}

##############################################################################
# build-image

my ($t0, $t1);
{
    $t0 = time();
    my ($rc, $out, $err) = run_cmd([$build, $image], timeout => 900);
    $t1 = time() - $t0;
    is($rc, 0, 'build-image succeeds') or diag($err . $out);
    is($out . $err, '', 'build-image is quiet on success');
    diag(sprintf('build-image (first call of this file): %.2f s', $t1));
}

my $id = image_field($image, '{{.Id}}');
ok($id, "image $image exists") or SMCP::Test::give_up('no image');

{
    # the docker commands it runs, through a wrapper that writes them down
    my $dir = tempdir('smcp-build-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    open(my $fh, '>', "$dir/docker") or die "$dir/docker: $!";
    print $fh "#!/bin/sh\nprintf '%s\\n' \"\$*\" >> '$dir/calls'\n"
            . "exec '" . ($ENV{DOCKER} // 'docker') . "' \"\$@\"\n";
    close $fh;
    chmod 0755, "$dir/docker";
    my $t = time();
    my ($rc, $out, $err) = do {
        local $ENV{DOCKER} = "$dir/docker";
        run_cmd([$build, $image], timeout => 120);
    };
    my $dt = time() - $t;
    is($rc, 0, 'second build-image succeeds');
    is($out . $err, '', 'second build-image is quiet');
    is(image_field($image, '{{.Id}}'), $id, 'second build-image: same image id');
    my @calls = split /\n/, SMCP::Test::slurp("$dir/calls");
    ok(@calls, 'second build-image: its docker commands written down') or diag("$dir/calls");
    is_deeply([ grep { !/^image inspect / } @calls ], [],
              'second build-image is a no-op: it only inspects images (no build, pull or rm)');
    diag(sprintf('build-image when up to date: %.3f s', $dt));
}

is(image_field($image, '{{index .Config.Labels "smcp.image"}}'), 'sandbox',
   'label smcp.image=sandbox');
is(image_field($image, '{{index .Config.Labels "smcp.opencode.version"}}'), $version,
   "label smcp.opencode.version=$version");
like(image_field($image, '{{index .Config.Labels "smcp.build-hash"}}'), qr/^[0-9a-f]{64}$/,
     'label smcp.build-hash (sha256)');
is(image_field($image, '{{.Config.User}}'), '1000:1000', 'runs as 1000:1000 by default');
is(image_field($image, '{{json .Config.Entrypoint}}'), '["/usr/local/bin/smcp-sandbox-entry"]',
   'entry point: the entry script');
is(image_field($image, '{{.Config.WorkingDir}}'), '/workspace', 'working dir /workspace');
is(image_field($image, '{{json .Config.Volumes}}'), 'null',
   'no VOLUME (no anonymous volumes left behind)');

# a changed entry script is noticed; a tarball failing the pinned integrity
# is refused: a copy of runner/sandbox in a temp dir, another tag
{
    my $dir = tempdir('smcp-sandbox-img-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$dir/sandbox" or die $!;
    mkdir "$dir/sandbox/agents" or die $!;
    for my $f (qw(Dockerfile entrypoint.sh registries.sh git-after.sh key-relay
                  session-events agents.sh agents/claude-code.jq agents/codex.jq
                  build-image)) {
        my ($rc, undef, $err) = run_cmd(['cp', '-p', "$root/runner/sandbox/$f", "$dir/sandbox/$f"]);
        die "cp $f: $err" if $rc;
    }
    my $tag = 'smcp-sandbox-test:' . lc(test_id());
    $tag =~ s/[^a-z0-9:_.-]/-/g;
    my $cache = "$root/build/cache/opencode";
    my %env = (SMCP_SANDBOX_BASE => base_image(), SMCP_CACHE_DIR => $cache);
    local @ENV{keys %env} = values %env;

    my ($rc, $out, $err) = run_cmd(["$dir/sandbox/build-image", $tag], timeout => 600);
    is($rc, 0, 'a copy builds another tag') or diag($err . $out);
    my $h1 = image_field($tag, '{{index .Config.Labels "smcp.build-hash"}}');
    is($h1, image_field($image, '{{index .Config.Labels "smcp.build-hash"}}'),
       'same inputs, same content hash');

    open(my $fh, '>>', "$dir/sandbox/entrypoint.sh") or die $!;
    print $fh "# changed by t/sandbox_image.t\n";
    close $fh;
    my $t = time();
    ($rc, $out, $err) = run_cmd(["$dir/sandbox/build-image", $tag], timeout => 600);
    my $dt = time() - $t;
    is($rc, 0, 'changed entry script: rebuilt') or diag($err . $out);
    my $h2 = image_field($tag, '{{index .Config.Labels "smcp.build-hash"}}');
    isnt($h2, $h1, 'changed entry script: new content hash');
    my ($rc2, $tail) = docker('run', '--rm', '--network', 'none', '--entrypoint', 'tail',
                              $tag, '-n', '1', '/usr/local/bin/smcp-sandbox-entry');
    is($tail, "# changed by t/sandbox_image.t\n", 'the image has the changed script');
    diag(sprintf('rebuild after an entry script change (layer cache): %.2f s', $dt));

    # a cache whose tarball does not match, and an `npm` that hands out a
    # bad one: refused, nothing tagged
    my $bad = "$dir/cache";
    mkdir $bad or die $!;
    mkdir "$dir/bin" or die $!;
    open($fh, '>', "$dir/bin/npm") or die $!;
    print $fh <<'SH';
#!/bin/sh
# stand-in npm: `npm pack ... --pack-destination DIR PKG@VER` writes junk
dest=.
while [ $# -gt 0 ]; do
    case $1 in --pack-destination) dest=$2; shift ;; *@*) spec=$1 ;; esac
    shift
done
name=$(echo "$spec" | sed 's/@/-/')
echo junk > "$dest/$name.tgz"
SH
    close $fh;
    chmod 0755, "$dir/bin/npm";
    open($fh, '>', "$bad/opencode-linux-x64-baseline-$version.tgz") or die $!;
    print $fh "not the real tarball\n";
    close $fh;
    open($fh, '>>', "$dir/sandbox/entrypoint.sh") or die $!;
    print $fh "# changed again\n";
    close $fh;
    local $ENV{SMCP_CACHE_DIR} = $bad;
    local $ENV{PATH} = "$dir/bin:$ENV{PATH}";
    ($rc, $out, $err) = run_cmd(["$dir/sandbox/build-image", $tag], timeout => 600);
    isnt($rc, 0, 'bad tarball: build-image fails');
    like($err, qr/integrity mismatch/, 'bad tarball: says "integrity mismatch"') or diag($err);
    is(image_field($tag, '{{index .Config.Labels "smcp.build-hash"}}'), $h2,
       'bad tarball: the tag still points at the last good build');
    ok(!-e "$bad/opencode-linux-x64-baseline-$version.tgz",
       'bad tarball: the cached bad tarball was dropped');

    docker('image', 'rm', '-f', $tag);
}

##############################################################################
# containers


# volumes: SMCP::Docker::create_volume (labelled, removed at the end)
sub new_volume { return create_volume() }

my $token = 'run-token-' . rhex(16);
my $egress = 'http://192.0.2.1:8090';    # TEST-NET: never reached here

# the locked-down sandbox: volume at /workspace, no network
sub sandbox_opts {
    my ($vol, %o) = @_;
    return (sandbox => 1, image => $image, network => 'none',
            extra => ['--mount', "type=volume,src=$vol,dst=/workspace",
                      @{ delete $o{extra} || [] }],
            %o);
}

# create, start attached, return (exit code, stdout, stderr, id)
sub run_sync {
    my (%o) = @_;
    my $timeout = delete $o{timeout} // 60;
    my $stdin = delete $o{stdin};
    push @{ $o{extra} }, '-i' if defined $stdin;
    my $cid = create_container(%o);
    my ($rc, $out, $err) = docker({ timeout => $timeout, stdin => $stdin },
                                  'start', '-a', (defined $stdin ? '-i' : ()), $cid);
    my $exit = container_inspect_field($cid, '{{.State.ExitCode}}');
    return ($exit, $out, $err, $cid);
}

my $vol = new_volume();
{
    my $t = time();
    my ($exit, $out, $err, $cid) = run_sync(sandbox_opts($vol, entrypoint => 'opencode',
                                                         cmd => ['--version']));
    is($exit, 0, 'opencode --version: exit 0') or diag($err);
    is($out, "$version\n", "opencode --version prints $version (uid 1000, read-only root, "
       . 'tmpfs /tmp and HOME, volume, cap-drop ALL, no-new-privileges, network none)');
    diag(sprintf('opencode --version in a locked-down container: %.2f s', time() - $t));
    my $hc = container_inspect_field($cid,
        '{{.HostConfig.ReadonlyRootfs}} {{json .HostConfig.CapDrop}} '
      . '{{json .HostConfig.SecurityOpt}} {{.HostConfig.NetworkMode}} {{.Config.User}}');
    is($hc, 'true ["ALL"] ["no-new-privileges"] none 1000:1000', 'the lockdown was in force');
}

# the entry script with arguments: config first, then the command
{
    my $script = <<'SH';
set -e
echo "== id"; id -u; id -g
echo "== pwd"; pwd
echo "== files"; cd /workspace/.oc/config/opencode && find . -mindepth 1 | sort; cd - >/dev/null
echo "== config"; cat /workspace/.oc/config/opencode/opencode.json
echo "== lock"; cat /workspace/.oc/config/opencode/package-lock.json
echo "== git"; git config --global --list | sort
echo "== dirs"; for d in /workspace/repo /workspace/.oc/data /workspace/.oc/cache /workspace/.oc/state; do [ -d "$d" ] && echo "$d"; done
echo "== env"; env | sort
echo "== npmrc"; cat ~/.npmrc; npm config get registry
echo "== pip"; pip config debug 2>/dev/null | grep -c . >/dev/null; echo "$PIP_INDEX_URL"
echo "== cargo"; cat ~/.cargo/config.toml
echo "== m2"; cat ~/.m2/settings.xml
echo "== gem"; cat ~/.gemrc
echo "== apt"; apt-config dump | grep -iE '^Dir::(State::Lists|Etc::SourceList|Etc::netrc) '; cat "$(dirname "$APT_CONFIG")/sources.list"
echo "== end"
SH
    my ($exit, $out, $err) = run_sync(sandbox_opts($vol,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token },
        cmd => ['bash', '-c', $script]));
    is($exit, 0, 'entry script with arguments: runs them, exit 0') or diag($err . $out);
    my %sec;
    my $cur;
    for my $l (split /\n/, $out) {
        if ($l =~ /^== (\w+)$/) { $cur = $1; $sec{$cur} = ''; next }
        $sec{$cur} .= "$l\n" if defined $cur;
    }
    is($sec{id}, "1000\n1000\n", 'runs as uid/gid 1000');
    is($sec{pwd}, "/workspace\n", 'in /workspace');
    is($sec{files}, "./node_modules\n./opencode.json\n./package-lock.json\n",
       'config dir: opencode.json, package-lock.json, node_modules/, nothing else');
    my $cfg = eval { decode_json($sec{config} // '') };
    is_deeply($cfg, {
        '$schema' => 'https://opencode.ai/config.json',
        autoupdate => JSON::PP::false, share => 'disabled', snapshot => JSON::PP::false,
        model => 'anthropic/claude-sonnet-4-5', small_model => 'anthropic/claude-sonnet-4-5',
        provider => { anthropic => { options => {
            baseURL => "$egress/anthropic/v1", apiKey => $token } } },
    }, 'opencode.json: the egress base URL and the run token as key, nothing else')
        or diag($sec{config});
    is($sec{lock}, qq({"packages":{"":{"dependencies":{"\@opencode-ai/plugin":"*"}}}}\n),
       'package-lock.json stops the plugin install');
    my $basic = encode_base64("x-access-token:$token", '');
    is($sec{git}, join('', map { "$_\n" } sort(
        "url.$egress/github/.insteadof=https://github.com/",
        "http.$egress/.extraheader=Authorization: Basic $basic",
        'user.name=OpenCode sandbox', 'user.email=sandbox@localhost',
        'init.defaultbranch=main', 'safe.directory=/workspace/repo')),
       'git: the git host through the proxy with the run token, an identity');
    is($sec{dirs}, join('', map { "$_\n" } qw(/workspace/repo /workspace/.oc/data
        /workspace/.oc/cache /workspace/.oc/state)), 'worktree and XDG dirs exist');
    my %env = map { /^([^=]+)=(.*)$/ ? ($1 => $2) : () } split /\n/, $sec{env} // '';
    is($env{XDG_CONFIG_HOME}, '/workspace/.oc/config', 'XDG_CONFIG_HOME in the volume');
    is($env{OPENCODE_DISABLE_AUTOUPDATE}, '1', 'OPENCODE_DISABLE_* set');
    my @tokenish = grep { index($env{$_}, $token) >= 0 } sort keys %env;
    is_deeply(\@tokenish, [qw(CARGO_REGISTRIES_SMCP_TOKEN GOPROXY GOSUMDB PIP_INDEX_URL
                              SMCP_RUN_TOKEN UV_DEFAULT_INDEX)],
              'the run token is the only credential in the env (registry tools carry it)');
    # package registries: every tool through the egress, with the run token
    (my $ehost = $egress) =~ s{^http://}{};
    my $auth = "http://x:$token\@$ehost";
    is($sec{npmrc}, "registry=$egress/registry/npm/\n//$ehost/registry/npm/:_authToken=$token\n"
       . "audit=false\nfund=false\nupdate-notifier=false\n$egress/registry/npm/\n",
       'npm: the registry route and the token (npm itself agrees)');
    is($env{PIP_INDEX_URL}, "$auth/registry/pypi/simple/", 'pip: the simple index route');
    is($env{PIP_TRUSTED_HOST}, (split /:/, $ehost)[0], 'pip: the egress host trusted (plain http)');
    is($env{GOPROXY}, "$auth/registry/go", 'go: GOPROXY');
    is($env{GOSUMDB}, "sum.golang.org $auth/registry/gosum", 'go: GOSUMDB');
    like($sec{cargo}, qr{replace-with = "smcp"\n.*registry = "sparse\+\Q$egress\E/registry/crates/index/"}s,
         'cargo: crates.io replaced by the index route');
    is($env{CARGO_REGISTRIES_SMCP_TOKEN}, "Bearer $token", 'cargo: the token');
    like($sec{m2}, qr{<mirrorOf>\*</mirrorOf><url>\Q$egress\E/registry/maven</url>},
         'maven: everything mirrored by the route');
    is($sec{gem}, "---\n:sources:\n- $auth/registry/rubygems/\n", 'gem: the route');
    like($sec{apt}, qr{^deb \Q$egress\E/registry/debian/debian bookworm main$}m,
         'apt: sources through the route');
    like($sec{apt}, qr{^Dir::State::lists "/home/sandbox/}mi, 'apt: lists in HOME (no root)');
}

# other providers: the base URL each SDK expects behind its egress route
# (paths checked against a real OpenCode run by hand: google
# /google/v1beta/models/M:streamGenerateContent, azure
# /azure/openai/v1/responses, openai /openai/v1/responses)
for my $case (
    ['openai/gpt-5', { openai => { options => { baseURL => "$egress/openai/v1", apiKey => $token } } }],
    ['google/gemini-2.5-pro', { google => { options => {
        baseURL => "$egress/google/v1beta", apiKey => $token } } }],
    ['azure/my-deployment', { azure => { models => { 'my-deployment' => {} }, options => {
        baseURL => "$egress/azure/openai/v1", apiKey => $token } } }],
    ['anthropic/claude-opus-4-1', { anthropic => { options => {
        baseURL => 'http://example.test/x/v1', apiKey => $token } } },
     { SMCP_PROVIDER_BASE_URL => 'http://example.test/x/v1' }],
) {
    my ($model, $want, $extra) = @$case;
    my ($exit, $out, $err) = run_sync(sandbox_opts($vol,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_MODEL => $model, %{ $extra || {} } },
        cmd => ['cat', '/workspace/.oc/config/opencode/opencode.json']));
    my $cfg = eval { decode_json($out) } || {};
    is_deeply($cfg->{provider}, $want, "$model: provider config") or diag($err . $out);
    is($cfg->{model}, $model, "$model: model");
}

# missing settings: a clear message, no agent
{
    my ($exit, $out, $err) = run_sync(sandbox_opts($vol,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress }));
    isnt($exit, 0, 'without SMCP_RUN_TOKEN: fails');
    like($err, qr/SMCP_RUN_TOKEN is not set/, '... saying so');
}

##############################################################################
# without arguments: a stand-in opencode on PATH (in the volume)

my $fake_opencode = <<'SH';
#!/bin/sh
# stand-in for opencode run (a server that will not start: `opencode
# serve` exits at once, and the entry script falls back to `opencode
# run`): records argv, cwd and stdin; then per FAKE_MODE
[ "${1:-}" = serve ] && exit 1
printf '%s\n' "$@" > /workspace/.oc/fake-argv
pwd > /workspace/.oc/fake-cwd
cat > /workspace/.oc/fake-stdin
echo '{"type":"text","part":{"text":"fake agent"}}'
case "${FAKE_MODE:-}" in
edit)
    printf 'one\n' > a.txt
    git add a.txt && git commit -qm 'agent commit'
    printf 'two\n' >> a.txt
    printf 'ctl:\001\033 bad:\377\303 utf8:\303\251 quote:" back:\\ tab:\t\n' > ctl.txt
    printf 'no final newline' > nonl.txt
    ;;
plant)
    # programs on PATH (its /workspace/bin first) named as the commands
    # the entry script runs: each leaves a mark when it runs
    mkdir -p /workspace/.oc/path-ran
    for c in git env mktemp awk sed find mv rm cat chmod perl tail head \
             sort stat; do
        printf '#!/bin/sh\ntouch /workspace/.oc/path-ran/%s\nexec /usr/bin/%s "$@"\n' \
            "$c" "$c" > /workspace/bin/$c
        chmod 0755 /workspace/bin/$c
    done
    printf 'planted\n' > planted.txt
    ;;
sleep)
    printf 'partial\n' > partial.txt
    trap 'echo "{\"type\":\"text\",\"part\":{\"text\":\"got TERM\"}}"; exit 143' TERM
    echo '{"type":"text","part":{"text":"trap set"}}'
    sleep 300 &
    wait
    ;;
esac
exit "${FAKE_EXIT:-0}"
SH

sub install_fake {
    my ($v) = @_;
    my ($exit, $out, $err) = run_sync(sandbox_opts($v, entrypoint => 'sh',
        cmd => ['-c', 'mkdir -p /workspace/bin && cat > /workspace/bin/opencode '
                    . '&& chmod 0755 /workspace/bin/opencode'],
        stdin => $fake_opencode));
    die "installing the fake opencode: $err$out" if $exit;
}

sub read_vol {
    my ($v, $path) = @_;
    my ($exit, $out) = run_sync(sandbox_opts($v, entrypoint => 'cat', cmd => [$path]));
    return $exit ? undef : $out;
}

my $path = '/workspace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

sub json_lines {
    my ($out) = @_;
    my @ev;
    for my $l (split /\n/, $out) {
        my $bytes = $l;
        my $valid_utf8 = utf8::decode(my $copy = $bytes);
        my $j = eval { JSON::PP->new->utf8->decode($bytes) };
        push @ev, { line => $l, json => $j, utf8 => $valid_utf8 };
    }
    return @ev;
}

my $v2 = new_volume();
install_fake($v2);
my $long = "\x{e9}" x 100;    # 100 characters, 200 bytes
my $task = "\n   Fix   the   bug \x{e9}\n\nSecond line \"quoted\" \$HOME `x`\n";
{
    my $tb = $task;
    utf8::encode($tb);
    my $t = time();
    my ($exit, $out, $err) = run_sync(sandbox_opts($v2,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_TASK => $tb, PATH => $path,
                 FAKE_MODE => 'edit' }));
    is($exit, 0, 'run: exit 0') or diag($err . $out);
    diag(sprintf('entry script run with a stand-in agent: %.2f s', time() - $t));
    my @ev = json_lines($out);
    ok(!grep({ !$_->{json} || !$_->{utf8} } @ev), 'every stdout line is strict JSON in UTF-8')
        or diag($out);
    is_deeply([map { $_->{json}{type} eq 'smcp' ? "smcp:$_->{json}{step}" : $_->{json}{type} } @ev],
              ['smcp:agent_start', 'text', 'smcp:agent_exit', 'smcp:diff'],
              'lifecycle: agent_start, the agent\'s events, agent_exit, diff last');
    is($ev[2]{json}{exitCode}, 0, 'agent_exit: exitCode 0');
    ok(!exists $ev[2]{json}{signal}, 'agent_exit: no signal');

    my $argv = read_vol($v2, '/workspace/.oc/fake-argv');
    is($argv, join('', map { "$_\n" } 'run', '--format', 'json', '--auto', '--model',
                   'anthropic/claude-sonnet-4-5', '--title', 'Fix the bug é'),
       'argv: run --format json --auto --model M --title <first line, blanks squeezed>');
    is(read_vol($v2, '/workspace/.oc/fake-cwd'), "/workspace/repo\n", 'cwd: the worktree');
    is(read_vol($v2, '/workspace/.oc/fake-stdin'), $tb, 'stdin: the task, byte for byte');

    my $diff = $ev[3]{json}{diff} // '';
    like($diff, qr{^diff --git a/a\.txt b/a\.txt\nnew file mode 100644\n.*\n\+one\n\+two\n}ms,
         'diff: the committed and the uncommitted change, against the start (empty tree)');
    like($diff, qr{\+ctl:\x01\x1b bad:\x{fffd}\x{fffd} utf8:\x{e9} quote:" back:\\ tab:\t\n},
         'diff: control characters kept, invalid UTF-8 replaced, UTF-8 kept');
    like($diff, qr{\+no final newline\n\\ No newline at end of file\n},
         'diff: a file without a final newline');
    like($diff, qr/\n\z/, 'diff: ends with a newline (git apply needs it)');
    my $file = read_vol($v2, '/workspace/.oc/smcp/diff');
    my $fd = $file;
    $fd =~ s/\xff\xc3/\xef\xbf\xbd\xef\xbf\xbd/;
    utf8::decode($fd);
    is($fd, $diff, 'the same diff is left in /workspace/.oc/smcp/diff');
}

# a continued session and a failing agent: --session instead of --title,
# the exit status passed on, the diff only of this run
{
    my ($exit, $out, $err) = run_sync(sandbox_opts($v2,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_TASK => "$long\nmore",
                 SMCP_SESSION => 'ses_0123456789abcdef', SMCP_MODEL => 'compat/qwen3-coder',
                 PATH => $path, FAKE_EXIT => 1 }));
    is($exit, 1, 'failing agent: the container exits with its status');
    my @ev = json_lines($out);
    my ($ae) = grep { ($_->{json}{step} // '') eq 'agent_exit' } @ev;
    is($ae && $ae->{json}{exitCode}, 1, 'agent_exit: exitCode 1');
    is($ev[-1]{json}{step}, 'diff', 'the diff is still the last line');
    my $argv = read_vol($v2, '/workspace/.oc/fake-argv');
    is($argv, join('', map { "$_\n" } 'run', '--format', 'json', '--auto', '--model',
                   'compat/qwen3-coder', '--session', 'ses_0123456789abcdef'),
       'argv: --session, no --title');
    my $cfg = decode_json(read_vol($v2, '/workspace/.oc/config/opencode/opencode.json'));
    is_deeply($cfg->{provider}, { compat => { npm => '@ai-sdk/openai-compatible',
        name => 'compat', models => { 'qwen3-coder' => {} },
        options => { baseURL => "$egress/compat/v1", apiKey => $token } } },
        'compat provider: package, model and base URL declared');
    # the last run committed a.txt: this run's diff starts from that commit
    unlike($ev[-1]{json}{diff}, qr{\+one\n}, 'diff: against this run\'s start commit');
}

# the title: at most 80 characters, not bytes
{
    my $v3 = new_volume();
    install_fake($v3);
    my $tb = "$long\n";
    utf8::encode($tb);
    my ($exit) = run_sync(sandbox_opts($v3,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_TASK => $tb, PATH => $path }));
    is($exit, 0, 'long first line: exit 0');
    my $argv = read_vol($v3, '/workspace/.oc/fake-argv') // '';
    utf8::decode($argv);
    my @a = split /\n/, $argv;
    is($a[-1], "\x{e9}" x 80, 'title: the first 80 characters');
    ($exit) = run_sync(sandbox_opts($v3,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_TASK => 'x', SMCP_TITLE => 'Given title',
                 PATH => $path }));
    $argv = read_vol($v3, '/workspace/.oc/fake-argv') // '';
    like($argv, qr/\n--title\nGiven title\n\z/, 'SMCP_TITLE wins');
}

# commands the agent put on PATH are not run after it (issue 22, point 8):
# PATH then keeps only directories this user cannot write
{
    my $v5 = new_volume();
    install_fake($v5);
    my ($exit, $out, $err) = run_sync(sandbox_opts($v5,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_TASK => 'plant', PATH => $path,
                 FAKE_MODE => 'plant' }));
    is($exit, 0, 'an agent planting commands on PATH: exit 0') or diag($err . $out);
    my @ev = json_lines($out);
    like($ev[-1]{json}{diff} // '', qr{^\+planted$}m, 'the diff has its change');
    my ($rc, $ran) = run_sync(sandbox_opts($v5, entrypoint => 'ls',
                                           cmd => ['-A', '/workspace/.oc/path-ran']));
    is($rc, 0, 'the marks\' directory is there');
    is($ran, '', 'none of the planted commands ran after the agent') or diag($ran);
}

# a stop signal reaches the agent; agent_exit and the diff still come out
{
    my $v4 = new_volume();
    install_fake($v4);
    my $cid = create_container(sandbox_opts($v4,
        env => { HOME => '/home/sandbox', SMCP_EGRESS_URL => $egress,
                 SMCP_RUN_TOKEN => $token, SMCP_TASK => 'wait', PATH => $path,
                 FAKE_MODE => 'sleep' }));
    start_container($cid);
    ok(wait_until(60, sub { (docker('logs', $cid))[1] =~ /trap set/ }, 0.1),
       'the stand-in agent is running, its trap set');
    my $t = time();
    my ($rc, $o, $e) = docker({ timeout => 120 }, 'stop', '-t', '60', $cid);
    my $dt = time() - $t;
    is($rc, 0, 'docker stop') or diag($e);
    # on the SIGTERM (exit 143 below), not the KILL after docker stop's 60 s
    ok($dt < 30, sprintf('stopped in %.2f s (bash as PID 1 passes SIGTERM on)', $dt));
    is(container_inspect_field($cid, '{{.State.ExitCode}}'), 143, 'exit status 143');
    my (undef, $out) = docker('logs', $cid);
    my @ev = json_lines($out);
    is_deeply([map { $_->{json}{step} // $_->{json}{part}{text} } @ev],
              ['agent_start', 'fake agent', 'trap set', 'got TERM', 'agent_exit', 'diff'],
              'the agent saw TERM; agent_exit and the diff follow')
        or diag($out);
    is($ev[4]{json}{signal}, 'TERM', 'agent_exit: signal TERM');
    is($ev[4]{json}{exitCode}, 143, 'agent_exit: exitCode 143');
    like($ev[5]{json}{diff}, qr{\+\+\+ b/partial\.txt}, 'the diff has the partial work');
}

done_testing();
