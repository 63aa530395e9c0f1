package SMCP::Report;

# Why a file failed, for the end of `make test`: under SMCP::Harness
# (SMCP_TEST_REPORT_DIR set), a test file keeps a copy of what it says
# when something goes wrong (Test::More's failure diagnostics and a die
# outside eval, with the test it was at), and deletes it again when the
# file passes.  The harness prints what failed files kept after the
# per-file times, just above prove's summary: the last lines CI shows,
# where "Tests: 0, no plan" alone says nothing of the cause.
#
# Loaded by SMCP::Test; only the test's own process writes (not the
# fakes and helpers it forks).  Core Perl only.

use strict;
use warnings;

use Symbol qw(gensym);
use Test::More ();

my $OWNER = $$;
my ($FILE, $FH, $DONE);

# at most this much kept per file
my $MAX = 64 * 1024;

sub _open {
    return undef if $DONE || $$ != $OWNER;
    return $FH if $FH;
    my $dir = $ENV{SMCP_TEST_REPORT_DIR};
    return undef unless $dir && -d $dir && $$ == $OWNER;
    (my $name = $0) =~ s{[^A-Za-z0-9._-]}{_}g;
    $FILE = "$dir/$name.$$";
    open($FH, '>>', $FILE) or return undef;
    my $old = select($FH); $| = 1; select($old);
    return $FH;
}

sub note_line {
    my ($text) = @_;
    my $fh = _open() or return;
    return if -s $FILE > $MAX;
    print $fh $text;
}

# Test::More's failure output, to STDERR as before and to the report
package SMCP::Report::Tee;

sub TIEHANDLE { my ($class, $fh) = @_; return bless { fh => $fh }, $class }
sub PRINT {
    my ($self, @text) = @_;
    my $s = join(defined $, ? $, : '', @text);
    SMCP::Report::note_line($s);
    return print { $self->{fh} } $s;
}
sub PRINTF {
    my ($self, $fmt, @args) = @_;
    return $self->PRINT(sprintf($fmt, @args));
}
sub FILENO { return fileno($_[0]{fh}) }
sub BINMODE { return 1 }
sub CLOSE { return 1 }

package SMCP::Report;

if ($ENV{SMCP_TEST_REPORT_DIR}) {
    my $tb = Test::More->builder;
    open(my $err, '>&', \*STDERR) or die "dup STDERR: $!";
    $err->autoflush(1);
    my $tee = gensym();
    tie *$tee, 'SMCP::Report::Tee', $err;
    $tb->failure_output($tee);

    my $prev = $SIG{__DIE__};
    $SIG{__DIE__} = sub {
        if ($$ == $OWNER && !$^S && defined $^S) {
            my $at = Test::More->builder->current_test;
            note_line("died after test $at: $_[0]");
        }
        $prev->(@_) if ref $prev eq 'CODE';
    };
}

# a file that passed leaves nothing; one that failed keeps its file open
# for Test::More's own last words ("Looks like you failed ...")
END {
    if ($FILE && $$ == $OWNER
        && $? == 0 && Test::More->builder->is_passing)
    {
        close $FH;
        unlink $FILE;
        $DONE = 1;
    }
}

1;
