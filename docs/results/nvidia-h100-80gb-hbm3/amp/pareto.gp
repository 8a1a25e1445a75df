set terminal pngcairo size 1280,420 font ',9'
set output 'pareto.png'
set multiplot layout 1,2 title 'Peak memory against step time (lower left is better)'
set key outside bottom center horizontal
set grid
set xrange [0:*]
set yrange [0:*]
set offsets 0, graph 0.08, graph 0.12, 0
set xlabel 'step time, ms (median)'
set ylabel 'peak above baseline, MiB'
set title "transformer:depth=4:hidden=256:heads=4:seq=128:batch=8:\ndropout=0.1" noenhanced
plot 'pareto.dat' index 0 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 0 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 1 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
set title "gpt2:size=small:depth=4:hidden=256:heads=4:seq=128:batch=8:\nvocab=8192:context=128:dropout=0.1" noenhanced
plot 'pareto.dat' index 2 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 2 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 3 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
unset multiplot
