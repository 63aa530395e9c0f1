package SMCP::Harness;

# The harness `make test` runs t/ with: TAP::Harness (prove --harness
# SMCP::Harness) with what t/schedule says and five habits of CI:
#
#   1. side by side: with prove -j N the files run N at a time, but the
#      files marked `alone` in t/schedule (they load the whole machine)
#      run one by one after the others, in the schedule's order, and the
#      files marked `beside` (they use no Docker) run side by side with
#      them; the files marked `swarm` (they make and leave a swarm) start
#      before all others, one by one, and the files marked `published`
#      (their stacks publish ports) only after those ended; the files
#      marked `first` start first among the rest (the longest: the
#      side-by-side part then ends together); of the files marked
#      `sandboxes` (their agents run in containers: OpenCode's start is
#      what loads the machine) at most SMCP_TEST_SANDBOX_JOBS run at once,
#      the other slots taking the files that start none
#   2. sanitized: when SMCP_TEST_SANITIZED_ENV names a file of VAR=value
#      lines (make test writes build/asan/test.env), the files marked
#      `sanitized` run with that environment: against the ASan+UBSan
#      builds, each file still run once (SMCP_TEST_SANITIZED_ONLY=1: only
#      those files, make test-asan)
#   3. under CI=true a skip is a failure: a file that skips all its tests,
#      or skips one, fails with the reason (a missing prerequisite on a new
#      machine must not pass unseen)
#   4. each file's wall time, slowest first, and when it started, before
#      prove's last lines
#   5. why a file failed: what it kept (SMCP::Report: failed tests' diag
#      lines, a die outside eval) printed after the times, so that the
#      last lines of a red CI run name the cause
#
#   PERL5LIB=t/lib prove --harness SMCP::Harness -j 4 -r t
#
# Core Perl only (Test::Harness 3.x).

use strict;
use warnings;

use parent 'TAP::Harness';

use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use Time::HiRes qw(time);

use SMCP::Scheduler;

# SMCP_TEST_SCHEDULE: another schedule (t/harness.t)
my $SCHEDULE = $ENV{SMCP_TEST_SCHEDULE} // dirname(__FILE__) . '/../../schedule';

sub _is_ci { return (($ENV{CI} // '') =~ /^(1|true|yes)$/i) ? 1 : 0 }

# t/schedule: "KIND PATTERN" lines (# comments); patterns are globs
# relative to the repository's top (t/mcp_*.t)
sub _schedule {
    my %s = (alone => [], first => [], beside => [], sanitized => [],
             swarm => [], published => [], sandboxes => []);
    open(my $fh, '<', $SCHEDULE) or die "SMCP::Harness: $SCHEDULE: $!";
    while (my $line = <$fh>) {
        $line =~ s/#.*//;
        next unless $line =~ /\S/;
        my @f = split ' ', $line;
        die "SMCP::Harness: $SCHEDULE:$.: expected KIND PATTERN\n"
            if @f != 2 || !exists $s{ $f[0] };
        push @{ $s{ $f[0] } }, $f[1];
    }
    close $fh;
    return \%s;
}

# a glob (*, ?, {a,b}) as a regular expression over a whole path
sub _glob_re {
    my ($glob) = @_;
    my $re = '';
    for my $c (split //, $glob) {
        $re .= $c eq '*' ? '[^/]*'
             : $c eq '?' ? '[^/]'
             : $c eq '{' ? '(?:'
             : $c eq '}' ? ')'
             : $c eq ',' ? '|'
             : quotemeta $c;
    }
    return qr/\A(?:\.\/)?$re\z/;
}

sub _matches {
    my ($path, $globs) = @_;
    for my $g (@$globs) {
        return 1 if $path =~ _glob_re($g);
    }
    return 0;
}

# VAR=value lines (# comments), as a hash
sub _read_env {
    my ($file) = @_;
    my %env;
    open(my $fh, '<', $file) or die "SMCP::Harness: $file: $!";
    while (my $line = <$fh>) {
        chomp $line;
        next if $line =~ /^\s*(#|$)/;
        $line =~ /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/
            or die "SMCP::Harness: $file:$.: expected VAR=value\n";
        $env{$1} = $2;
    }
    close $fh;
    return \%env;
}

sub new {
    my ($class, $args) = @_;
    my $self = $class->SUPER::new($args);
    $self->{smcp} = { schedule => _schedule(), times => {}, starts => {},
                      failed => {}, skips => 0 };
    # SMCP::Report's files: one per failing file, removed at the end
    $ENV{SMCP_TEST_REPORT_DIR} = $self->{smcp}{reports}
        = tempdir('smcp-reports-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    if (my $f = $ENV{SMCP_TEST_SANITIZED_ENV}) {
        $self->{smcp}{sanitized_env} = _read_env($f);
    }
    return $self;
}

# (\@picked, \@left): the tests matching the globs, in the globs' order,
# and the others
sub _pick {
    my ($tests, $globs, $name) = @_;
    my (@picked, @left);
    @left = @$tests;
    for my $g (@$globs) {
        push @picked, grep { $name->($_) =~ _glob_re($g) } @left;
        @left = grep { $name->($_) !~ _glob_re($g) } @left;
    }
    return (\@picked, \@left);
}

# the files in the order they start; with jobs, the rules: the side-by-side
# files first (the `swarm` ones one by one from the start, the `published`
# ones after them, beside both the others, the `first` ones leading), then
# the `alone` ones in sequence, beside them the `beside` ones
sub runtests {
    my ($self, @tests) = @_;
    my $s = $self->{smcp}{schedule};
    my $name = sub { ref $_[0] ? $_[0][0] : $_[0] };
    # make test-asan: the sanitized files alone
    @tests = grep { _matches($name->($_), $s->{sanitized}) } @tests
        if $ENV{SMCP_TEST_SANITIZED_ONLY};
    my ($alone, $rest) = _pick(\@tests, $s->{alone}, $name);
    # beside: with alone files only (else they are side-by-side files)
    my ($beside, $first, $swarm, $published) = ([]);
    ($beside, $rest) = _pick($rest, $s->{beside}, $name) if @$alone;
    ($swarm, $rest) = _pick($rest, $s->{swarm}, $name);
    ($first, $rest) = _pick($rest, $s->{first}, $name);
    # published: in the order of the others (the `first` ones leading)
    my @order = (@$first, @$rest);
    ($published, my $others) = _pick(\@order, $s->{published}, $name);
    @tests = (@$swarm, @$others, @$published, @$alone, @$beside);
    if (($self->jobs // 1) > 1) {
        my $esc = sub { [ map { _escape($name->($_)) } @_ ] };
        # blocks: TAP::Harness takes a block's files before the next
        # block's (a bare file before any block), so the swarm files start
        # first and the published ones take the slots freed after them
        my @par = (
            (@$swarm || @$published
             ? { seq => [ (@$swarm ? { seq => $esc->(@$swarm) } : ()),
                          (@$published ? { par => $esc->(@$published) }
                                       : ()) ] }
             : ()),
            (@$others ? { par => $esc->(@$others) } : ()),
        );
        $self->rules({ seq => [
            (@par ? { par => \@par } : ()),
            (@$alone ? { par => [ { seq => $esc->(@$alone) },
                                  (@$beside ? { par => $esc->(@$beside) }
                                            : ()) ] } : ()),
        ] });
    }
    $self->{smcp}{t0} = time();
    return $self->SUPER::runtests(@tests);
}

# the scheduler: at most SMCP_TEST_SANDBOX_JOBS of the files marked
# `sandboxes` at once (SMCP::Scheduler; unset or 0: no cap)
sub make_scheduler {
    my ($self, @tests) = @_;
    my $globs = $self->{smcp}{schedule}{sandboxes};
    return SMCP::Scheduler->new(
        tests => [ $self->_add_descriptions(@tests) ],
        rules => $self->rules,
        heavy => sub { _matches($_[0], $globs) },
        limit => ($ENV{SMCP_TEST_SANDBOX_JOBS} // 0) =~ /^([0-9]+)$/ ? $1 : 0);
}

# a path as a rule pattern that matches only itself
sub _escape {
    my ($p) = @_;
    $p =~ s/([\\*?{},])/\\$1/g;
    return $p;
}

# a sanitized file starts with the sanitizers' environment
sub make_parser {
    my ($self, $job) = @_;
    my $env = $self->{smcp}{sanitized_env};
    if ($env && _matches($job->filename, $self->{smcp}{schedule}{sanitized})) {
        local @ENV{ keys %$env } = values %$env;
        local $ENV{SMCP_TEST_SANITIZED} = 1;
        return $self->SUPER::make_parser($job);
    }
    return $self->SUPER::make_parser($job);
}

# before the file's line is printed: its time, and under CI its skips as
# errors
sub finish_parser {
    my ($self, $parser, $session) = @_;
    my $file = $session->name;
    my $took = ($parser->end_time // time()) - ($parser->start_time // time());
    $self->{smcp}{times}{$file} = $took;
    $self->{smcp}{starts}{$file} = ($parser->start_time // time())
                                   - ($self->{smcp}{t0} // time());
    $self->{smcp}{failed}{$file} = 1
        if $parser->has_problems || $parser->exit || $parser->wait;
    if (defined(my $why = $parser->skip_all)) {
        $self->{smcp}{skips}++;
        $parser->_add_error("skipped under CI=true: $why") if _is_ci();
    }
    for my $n ($parser->skipped) {
        $self->{smcp}{skips}++;
        $parser->_add_error("test $n skipped under CI=true") if _is_ci();
    }
    return $self->SUPER::finish_parser($parser, $session);
}

# each file's time, slowest first, then prove's summary (its last line is
# what CI reads)
sub summary {
    my ($self, @args) = @_;
    my $t = $self->{smcp}{times};
    my @files = sort { $t->{$b} <=> $t->{$a} || $a cmp $b } keys %$t;
    if (@files) {
        my $sum = 0;
        $sum += $_ for values %$t;
        my $w = 0;
        for (@files) { $w = length if length > $w }
        print "\nTime per file (wall, slowest first; when it started):\n";
        printf "  %-*s %8.1f s  +%.0f s\n", $w, $_, $t->{$_},
               $self->{smcp}{starts}{$_} // 0 for @files;
        printf "  %-*s %8.1f s of files, %.1f s of wall time, %d at a time\n",
               $w, 'total', $sum, time() - ($self->{smcp}{t0} // time()),
               $self->jobs // 1;
        printf "  %d skip(s)%s\n", $self->{smcp}{skips},
               _is_ci() ? ' (each a failure under CI=true)' : ''
            if $self->{smcp}{skips};
    }
    $self->_reports;
    return $self->SUPER::summary(@args);
}

# what each failed file kept (SMCP::Report), its last lines
my $REPORT_LINES = 12;

sub _reports {
    my ($self) = @_;
    my $dir = $self->{smcp}{reports} // return;
    for my $file (sort keys %{ $self->{smcp}{failed} }) {
        (my $name = $file) =~ s{[^A-Za-z0-9._-]}{_}g;
        my @lines;
        for my $f (sort glob("$dir/$name.*")) {
            open(my $fh, '<', $f) or next;
            push @lines, grep { /\S/ } <$fh>;
            close $fh;
        }
        next unless @lines;
        splice(@lines, 0, @lines - $REPORT_LINES) if @lines > $REPORT_LINES;
        print "\nWhy $file failed (its last words):\n";
        for (@lines) {
            chomp(my $l = $_);
            $l = substr($l, 0, 200) . '...' if length $l > 200;
            print "  $l\n";
        }
    }
}

1;
