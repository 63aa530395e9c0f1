#!/usr/bin/env perl
# A warm pool per image (--pool N for the default image, --pool-images
# IMAGE=N,... for the others), everything real but the model: redis, nginx
# with the module, the sandbox image and two images built FROM it, the
# fake Anthropic, dockerd.
#
#   1. each pooled image's pool fills to its own N: idle sandboxes of that
#      image (its Config.Image, its smcp.pool.image label); the metric
#      smcp_runner_pool_idle is their total
#   2. a new session's run of the other image takes one of that image's
#      (its tool sees the image's file), and only that pool refills; one of
#      the default image takes one of the default's
#   3. a run of an image without a pool (allowed, not pooled) starts cold:
#      a container of its own, the pools untouched, not counted as the
#      pool empty
#   4. an idle sandbox of the other image killed: replaced by one of that
#      image
#   5. a runner killed and started again with other pools: the idle ones
#      it left, of both images, removed (the log names their image); only
#      the new pools fill
#   6. SIGTERM drains every image's pool
#   7. bad --pool-images values stop the runner at start (exit 2), saying
#      what is wrong
#
# Needs root, Docker, `make` (module, runner) and redis-server; the sandbox
# image ($SMCP_SANDBOX_IMAGE) is built on first use, the two FROM it here
# (seconds), removed at the end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Docker qw(docker test_id ensure_docker ensure_sandbox_image image_from_sandbox);
use SMCP::Metrics qw(scrape_value);
use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_encode wait_until run_cmd);

my %SCRIPTS = (
    # which image the sandbox is
    'SCENARIO-WHICH' => [
        bash_step('cat /usr/local/share/imgpool.txt 2>/dev/null || echo BASE-IMAGE',
                  'Which image'),
        { text => 'looked' },
    ],
);

ensure_docker(root => 1);
my ($base) = ensure_sandbox_image();
my $tag = 'smcp-test-imgpool-' . lc(test_id());
$tag =~ s/[^a-z0-9_.-]/-/g;
my %mark = (other => 'OTHER-7c2', cold => 'COLD-1f9');
my %img = map {
    ($_ => image_from_sandbox("$tag:$_", 'USER root',
                              "RUN echo $mark{$_} > /usr/local/share/imgpool.txt",
                              'USER 1000:1000'))
} sort keys %mark;

# nginx offers both; the runner allows both, pools the default and other
my $s = SMCP::Stack->new(scripts => \%SCRIPTS,
                         location => "sandbox_mcp_images $img{other} $img{cold};");
my $t = $s->t;

my %WANT = ($base => 1, $img{other} => 2);
my $mport = $t->free_port;
my @POOLS = ('--allowed-images', "$img{other},$img{cold}", '--pool', $WANT{$base},
             '--pool-images', "$img{other}=$WANT{$img{other}}",
             '--metrics', "127.0.0.1:$mport");
my $r = $s->start_runner(concurrency => 2, args => \@POOLS);

# the runner's idle pooled sandboxes: {id => image (its label)}
sub idle {
    my ($r) = @_;
    my (undef, $out) = docker('ps', '--no-trunc', '--filter', "label=smcp.pool=$r->{name}",
                              '--format', '{{.ID}} {{.Names}} {{.Label "smcp.pool.image"}}');
    my %c;
    for (grep { /\S/ } split /\n/, $out) {
        my ($id, $name, $image) = split ' ';
        $c{$id} = $image // '' if $name =~ /^smcp-pool-/;
    }
    return \%c;
}

# idle ones by image: {image => n}
sub counts {
    my %n;
    $n{$_}++ for values %{ idle($_[0]) };
    return \%n;
}

sub full {
    my ($r, %want) = @_;
    return wait_until(90, sub {
        my $n = counts($r);
        return json_encode({ map { ($_ => $n->{$_} // 0) } keys %want, keys %$n })
            eq json_encode({ map { ($_ => $want{$_} // 0) } keys %want, keys %$n });
    }, 0.2);
}

# a new session's run of image (undef: the default): (run, its hash)
sub run_of {
    my ($image, $title) = @_;
    my ($run) = $s->run_completed($title, $r, task => 'SCENARIO-WHICH: look',
                                  title => $title, ($image ? (image => $image) : ()));
    return ($run, $s->run_hash($run->{runId}));
}

##############################################################################

subtest 'each image keeps its own pool' => sub {
    ok(full($r, %WANT), "idle: $WANT{$base} of the default image, $WANT{$img{other}} of the other")
        or diag(json_encode(counts($r)), $s->runner_log_tail($r, 20));
    my $idle = idle($r);
    for my $id (sort keys %$idle) {
        my (undef, $image) = docker('inspect', '--format', '{{.Config.Image}}', $id);
        chomp $image;
        is($image, $idle->{$id}, "$id: made of $image, as its label says");
    }
    is(scrape_value($mport, 'smcp_runner_pool_idle'), 3, 'metrics: smcp_runner_pool_idle 3 (all images)');
    like($s->runner_log($r), qr/starting: .* pool=3 /, 'the runner says pool=3 at start');
};

subtest "a run of the other image takes one of that image's" => sub {
    my $before = idle($r);
    my ($run, $h) = run_of($img{other}, 'other');
    is($before->{ $h->{container_id} // '' }, $img{other},
       'its container: one of the idle ones of the other image')
        or diag(json_encode([$h->{container_id}, $before]));
    like($s->tool_output($run->{runId}), qr/^\Q$mark{other}\E$/m, '... its tool ran in that image');
    is($h->{image}, $img{other}, '... the run hash names it');
    ok(full($r, %WANT), 'that pool refilled, the other untouched')
        or diag(json_encode(counts($r)));
    my $after = idle($r);
    ok(!$after->{ $h->{container_id} }, 'the taken one is not idle again');
};

subtest "a run of the default image takes one of the default's" => sub {
    my $before = idle($r);
    my ($run, $h) = run_of(undef, 'default');
    is($before->{ $h->{container_id} // '' }, $base,
       'its container: the idle one of the default image')
        or diag(json_encode([$h->{container_id}, $before]));
    like($s->tool_output($run->{runId}), qr/^BASE-IMAGE$/m, '... its tool ran in that image');
    ok(full($r, %WANT), 'refilled');
};

subtest 'a run of an image without a pool starts cold' => sub {
    ok(full($r, %WANT), 'full');
    my $before = idle($r);
    my ($run, $h) = run_of($img{cold}, 'cold');
    ok(!exists $before->{ $h->{container_id} // '' }, 'its container: not a pooled one');
    like($s->tool_output($run->{runId}), qr/^\Q$mark{cold}\E$/m, '... made of its image');
    my $id12 = substr($h->{container_id} // 'x', 0, 12);
    like($s->runner_log($r), qr/running in container \Q$id12\E(?! \(pooled\))/, '... not "(pooled)"');
    is_deeply(idle($r), $before, 'the pools untouched');
    is(scrape_value($mport, 'smcp_runner_pool_empty_total'), 0,
       'metrics: smcp_runner_pool_empty_total 0 (no pool is not an empty pool)');
};

subtest 'an idle sandbox of the other image killed: replaced by one of it' => sub {
    ok(full($r, %WANT), 'full');
    my $before = idle($r);
    my ($victim) = grep { $before->{$_} eq $img{other} } sort keys %$before;
    docker('kill', $victim);
    ok(wait_until(30, sub {
        my $now = idle($r);
        !exists $now->{$victim} && (grep { $now->{$_} eq $img{other} } keys %$now) == 2 }, 0.2),
       'removed and replaced') or diag($s->runner_log_tail($r, 20));
    ok(full($r, %WANT), 'both pools full');
    like($s->runner_log($r), qr/stopped while idle: replaced/, 'the runner says so');
};

subtest 'a runner killed, started with other pools: its idle ones of every image go' => sub {
    ok(full($r, %WANT), 'full');
    my @old = sort keys %{ idle($r) };
    $s->stop_runner($r, 'KILL');
    is(scalar(keys %{ idle($r) }), 3, 'left running by the killed runner');
    # the next one pools the default image only, two of them
    $r = $s->start_runner(concurrency => 2, args => ['--allowed-images', "$img{other},$img{cold}",
                                                    '--pool', 2, '--metrics', "127.0.0.1:$mport"]);
    ok(wait_until(30, sub { my $now = idle($r); !grep { exists $now->{$_} } @old }, 0.2),
       "the dead runner's idle sandboxes removed, both images'")
        or diag($s->runner_log_tail($r, 20));
    like($s->runner_log($r), qr/removing sandbox \w+ of \Q$img{other}\E, left idle/,
         '... the log names the image');
    ok(full($r, $base => 2), 'only the default pool fills, to 2')
        or diag(json_encode(counts($r)));
    $s->stop_runner($r, 'TERM');
    $r = $s->start_runner(concurrency => 2, args => \@POOLS);
    ok(full($r, %WANT), 'the first pools again');
};

subtest 'SIGTERM drains every pool' => sub {
    ok(full($r, %WANT), 'full');
    my @idle = sort keys %{ idle($r) };
    my (undef, $vols) = docker('inspect', '--format', '{{range .Mounts}}{{.Name}} {{end}}', @idle);
    $s->stop_runner($r, 'TERM');
    my (undef, $left) = docker('ps', '-aq', '--filter', "label=smcp.pool=$r->{name}");
    is($left, '', 'no pooled sandbox left');
    my (undef, $vl) = docker('volume', 'ls', '-q');
    my %v = map { ($_ => 1) } split ' ', $vl;
    ok(!grep({ $v{$_} } split ' ', $vols), 'nor their volumes');
};

subtest 'a bad --pool-images stops the runner at start, saying why' => sub {
    my @allowed = ('--allowed-images', "$img{other},$img{cold}");
    my @cases = (
        [[@allowed, '--pool-images', "$tag:nope=1"],
         qr/--pool-images: \Q$tag\E:nope is not an image a run may choose/],
        [[@allowed, '--pool-images', "$img{other}"], qr/want IMAGE=N/],
        [[@allowed, '--pool-images', "$img{other}=x"], qr/not a number from 0 to 64/],
        [[@allowed, '--pool', 1, '--pool-images', "$base=1"],
         qr/\Q$base\E is named twice \(--pool is the default image's\)/],
        [[@allowed, '--pool', 40, '--pool-images', "$img{other}=25"],
         qr/65 sandboxes in all, at most 64/],
        [[@allowed, '--pool-images', "$img{other}=1", '--backend', 'swarm'],
         qr/swarm backend has no warm pool/],
    );
    for my $c (@cases) {
        my ($rc, $out, $err) = run_cmd([$s->{runner_bin}, '--secret-file', $t->secret_file,
            '--egress-url', 'http://127.0.0.1:1', '--image', $base, @{ $c->[0] }], timeout => 10);
        is($rc, 2, "@{ $c->[0] }[2 .. $#{ $c->[0] }]: exit 2");
        like($err, $c->[1], '... saying why') or diag($err);
    }
};

$s->done;
