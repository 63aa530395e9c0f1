#!/usr/bin/env perl
# make backup and make restore (issue 23, 5; docs/operations.md, "Backup
# and restore"): a run writes a file in its session's workspace; `make
# backup` while the stack is up (Redis read with redis-cli --rdb) makes
# one file of mode 600 holding the secrets, the Redis snapshot and the
# session's volume; a restore over the running stack refuses and changes
# nothing; then everything is destroyed (make down, the state directory
# and the session volume removed), a file that is not a backup is refused,
# `make restore` and `make up` bring it back:
#
#   - the token of before works, in its MCP session of before;
#     get_result of the old run answers completed, with its result
#   - a follow-up in the restored session sees the file its first run
#     wrote (and continues its OpenCode conversation)
#   - the dashboard link of before opens the run list, with the old run
#   - a restore over that state refuses; `make backup` with the stack down
#     (Redis read from a copy of its append-only file) works too
#
# make runs in a checkout of its own (SMCP::MakeUp checkout => 1), the
# egress side and the runner in front of a fake model.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Path qw(remove_tree);
use File::Temp qw(tempdir);
use Test::More;
use SMCP::Test qw(:all);
use SMCP::Docker qw(docker docker_available);
use SMCP::MakeUp;
use SMCP::Stack qw(bash_step);

my $root = repo_root();
require_prereqs('build/smcp-token, smcp-runner and the module (run `make`)')
    unless -x "$root/build/smcp-token" && -x "$root/build/smcp-runner" && -f module_path();
prereq_fail('no Docker engine: make up\'s runner needs one') unless docker_available();

my $NOTE = 'kept across a restore';
my $up = SMCP::MakeUp->new(checkout => 1, scripts => {
    'SCENARIO-WRITE' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/kept.txt', content => "$NOTE\n" } } },
        { text => 'Wrote it.' },
    ],
    'SCENARIO-READ' => [ bash_step('cat kept.txt', 'Read the file'), { text => 'Read it.' } ],
});
my ($top, $state, $port) = ($up->top, $up->state, $up->port);
my $dir = tempdir('smcp-backups-XXXXXX', TMPDIR => 1, CLEANUP => 1);

my ($rc, $out) = $up->up;
is($rc, 0, 'make up') or SMCP::Test::give_up($out);
my ($token) = $out =~ m{^  Token:\s+(\S+)}m;
my ($dash) = $out =~ m{^  Dashboard:\s+(\S+)}m;
my $sid = $up->initialize($token // '');
ok($sid, 'an MCP session');

my $rt = $up->call($token, $sid, 'opencode_run_task', { task => 'SCENARIO-WRITE: write it' });
my ($run, $ses) = ($rt->{runId} // 'none', $rt->{sessionId} // 'none');
my $res = $up->wait_done($token, $sid, $run, 180);
is($res->{status}, 'completed', 'a run writes a file in its session\'s workspace')
    or diag(explain($res), `tail -20 $state/logs/runner.log`);
my $volume = "smcp-$ses";
my ($vrc) = docker('volume', 'inspect', $volume);
is($vrc, 0, "its session's volume $volume");

# a rotated key signs a second token: the keys file goes with the backup
($rc, $out) = $up->make('rotate-secret');
is($rc, 0, 'make rotate-secret') or diag($out);
(my $trc, my $token2) = $up->make('token', 'SUB=stack-tenant');
($token2) = ($token2 // '') =~ /^([\w-]+\.[\w-]+\.[\w-]+)$/m;
ok($token2 && $up->initialize($token2), 'a token the new key signed works');

# ---------------------------------------------------------------------------
# make backup, the stack up

my $file = "$dir/one.tar.gz";
($rc, $out) = $up->make('backup', "BACKUP=$file");
is($rc, 0, 'make backup while the stack is up') or diag($out);
like($out, qr/backup: \Q$file\E \(1 session volume\(s\), Redis, the secrets; mode 600/,
     '... says what it holds');
is(sprintf('%o', (stat $file)[2] & 07777), '600', '... a file of mode 600 (the signing secret is in it)');
my (undef, $list) = run_cmd(['tar', '-tzf', $file]);
is(join(' ', sort grep { !m{/$} } split /\n/, $list),
   join(' ', map { "sandbox-mcp-backup/$_" }
             sort('MANIFEST', 'keys', 'redis-password', 'redis.rdb', 'secret',
                  "volumes/$volume.tar")),
   '... the manifest, the secret and the keys file, the Redis snapshot, the session\'s volume');
($rc, $out) = $up->make('backup', "BACKUP=$file");
isnt($rc, 0, 'make backup to a file that exists refuses');
like($out, qr/exists: name another file/, '... saying so');

($rc, $out) = $up->make('restore', "BACKUP=$file");
isnt($rc, 0, 'make restore over the running stack refuses');
like($out, qr/the stack is up .*: make down first/, '... make down first') or diag($out);
ok($up->initialize($token), '... and the stack serves on');

# ---------------------------------------------------------------------------
# everything destroyed

($rc, $out) = $up->down;
is($rc, 0, 'make down') or diag($out);
remove_tree($state);
ok(!-e $state, 'the state directory removed');
($vrc) = docker('volume', 'rm', $volume);
is($vrc, 0, "the session's volume removed");

# a file that is not a backup: refused, nothing written
{
    my $evil = tempdir('smcp-evil-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    mkdir "$evil/sandbox-mcp-backup";
    symlink('/etc/passwd', "$evil/sandbox-mcp-backup/secret");
    my $bad = "$dir/bad.tar.gz";
    system('tar', '-C', $evil, '-czf', $bad, 'sandbox-mcp-backup') == 0 or die 'tar';
    ($rc, $out) = $up->make('restore', "BACKUP=$bad");
    isnt($rc, 0, 'make restore of an archive holding a symlink refuses');
    like($out, qr/not a sandbox-mcp backup \(it holds sandbox-mcp-backup\/secret/, '... saying why')
        or diag($out);
    ok(!-e "$state/secret", '... nothing written');
}

($rc, $out) = $up->make('restore', "BACKUP=$file");
is($rc, 0, 'make restore') or diag($out);
like($out, qr/restored into \Q$state\E: the secrets, Redis \(\d+ keys\), 1 session volume/,
     '... says what it restored');
is(sprintf('%o', (stat "$state/secret")[2] & 07777), '600', '... the secret of mode 600');
ok(-d "$state/redis/appendonlydir", '... Redis as make up runs it (its append-only file)');

($rc, $out) = $up->up;
is($rc, 0, 'make up on the restored state') or diag($out);

# ---------------------------------------------------------------------------
# as before

ok($up->initialize($token), 'the token of before works');
ok($token2 && $up->initialize($token2), '... and the one the rotated key signed');
$res = $up->call($token, $sid, 'opencode_get_result', { runId => $run });
is($res->{status}, 'completed', 'get_result of the old run, in the MCP session of before: completed');
is($res->{result}, 'Wrote it.', '... with its result');

my $fu = $up->call($token, $sid, 'opencode_run_task',
                   { task => 'SCENARIO-READ: read it', sessionId => $ses });
my $fid = $fu->{runId} // 'none';
is($fu->{sessionId}, $ses, 'a follow-up in the restored session');
$res = $up->wait_done($token, $sid, $fid, 180);
is($res->{status}, 'completed', '... completes') or diag(explain($res), `tail -20 $state/logs/runner.log`);
my @agent = grep { ($_->{type} // '') eq 'agent' } $up->t->run_events($fid);
ok(grep({ ($_->{data} // '') =~ /\Q$NOTE\E/ } @agent),
   '... and its agent read the file the first run wrote') or diag(map { "$_->{data}\n" } @agent);

{
    my ($r, $c) = $up->ui_open($dash);
    is($r->{status}, 303, 'the dashboard link of before opens (303, its cookie)');
    $r = $up->ui_get($c, '/ui/api/runs');
    is($r->{status}, 200, '... the run list');
    my $j = json_decode($r->{content} // '') // {};
    ok(grep({ ($_->{runId} // '') eq $run } @{ $j->{runs} || [] }), '... with the old run')
        or diag($r->{content});
    $r = $up->ui_get($c, "/ui/runs/$run/data");
    is((json_decode($r->{content} // '') // {})->{status}, 'completed', '... and its page\'s data');
}

# ---------------------------------------------------------------------------
# a restore over this state refuses; make backup with the stack down

($rc, $out) = $up->down;
is($rc, 0, 'make down') or diag($out);
($rc, $out) = $up->make('restore', "BACKUP=$file");
isnt($rc, 0, 'make restore over a state directory holding a stack\'s state refuses');
like($out, qr/holds a stack's state .* move it aside/, '... move it aside') or diag($out);
my $cold = "$dir/cold.tar.gz";
($rc, $out) = $up->make('backup', "BACKUP=$cold");
is($rc, 0, 'make backup with the stack down') or diag($out);
like($out, qr/\(1 session volume\(s\), Redis, the secrets/, '... the session volume too');
my (undef, $manifest) = run_cmd(['tar', '-xzOf', $cold, 'sandbox-mcp-backup/MANIFEST']);
like($manifest, qr/^volume \Q$volume $ses\E$/m, '... named in its manifest');
my (undef, $rdb) = run_cmd(['tar', '-xzOf', $cold, 'sandbox-mcp-backup/redis.rdb']);
like($rdb, qr/^REDIS/, '... and a Redis snapshot');

$up->stop_fakes;
done_testing();
