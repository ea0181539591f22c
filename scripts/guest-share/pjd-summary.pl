#!/usr/bin/perl
# The counts of one pjdfstest folder's `prove -rv` output, as console
# lines for scripts/guest-share.sh:
#   @@WALKFS-PJD fs=FS folder=F files=N files_failed=N assertions=N failed=N missing=N todo=N secs=N
#   @@WALKFS-NOTOK fs=FS folder=F file=F.t line=not ok ...   (the first 40)
# assertions: the plans' sum; failed: "not ok" without "# TODO"; missing:
# planned but never reported (a test file that died). A file fails when
# it has a failure, a missing assertion, or no plan.
#   perl pjd-summary.pl --fs FS --folder F --secs N --prefix TESTS-DIR/ PROVE-OUTPUT
use strict;
use warnings;
use Getopt::Long;

my ($fs, $folder, $secs, $prefix) = ('', '', 0, '');
GetOptions('fs=s' => \$fs, 'folder=s' => \$folder, 'secs=i' => \$secs, 'prefix=s' => \$prefix)
    or die "usage: $0 --fs FS --folder F --secs N --prefix DIR/ FILE\n";

my (@files, %t, $cur);
sub tap {
    my ($l) = @_;
    return unless defined $cur;
    my $x = $t{$cur};
    if ($l =~ /^1\.\.(\d+)/) { $x->{plan} = $1 }
    elsif ($l =~ /^ok \d/) { $x->{ran}++ }
    elsif ($l =~ /^not ok \d/) {
        $x->{ran}++;
        if ($l =~ /# TODO/) { $x->{todo}++ } else { push @{ $x->{bad} }, $l }
    }
}
while (my $l = <>) {
    chomp $l;
    if ($l =~ /^(\S+\.t) \.\.+ ?(.*)$/) {
        ($cur = $1) =~ s/^\Q$prefix\E//;
        push @files, $cur;
        $t{$cur} = { plan => 0, ran => 0, todo => 0, bad => [] };
        tap($2) if length $2;
        next;
    }
    tap($l);
}
my ($assert, $failed, $missing, $todo, $ffailed, $shown) = (0) x 6;
for my $f (@files) {
    my $x = $t{$f};
    $assert += $x->{plan};
    $failed += @{ $x->{bad} };
    $todo += $x->{todo};
    my $miss = $x->{plan} > $x->{ran} ? $x->{plan} - $x->{ran} : 0;
    $missing += $miss;
    $ffailed++ if @{ $x->{bad} } || $miss || !$x->{plan};
    for my $b (@{ $x->{bad} }) {
        print "\@\@WALKFS-NOTOK fs=$fs folder=$folder file=$f line=$b\n" if $shown++ < 40;
    }
    print "\@\@WALKFS-NOTOK fs=$fs folder=$folder file=$f line=planned $x->{plan} assertions but ran $x->{ran}\n"
        if $miss && $shown++ < 40;
}
printf "\@\@WALKFS-PJD fs=%s folder=%s files=%d files_failed=%d assertions=%d failed=%d missing=%d todo=%d secs=%d\n",
    $fs, $folder, scalar @files, $ffailed, $assert, $failed, $missing, $todo, $secs;
