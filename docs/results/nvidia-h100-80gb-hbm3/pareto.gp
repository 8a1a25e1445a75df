set terminal pngcairo size 1280,1260 font ',9'
set output 'pareto.png'
set multiplot layout 3,2 title 'Peak memory against step time (lower left is better)'
set key outside bottom center horizontal
set grid
set xrange [0:*]
set yrange [0:*]
set offsets 0, graph 0.08, graph 0.12, 0
set xlabel 'step time, ms (median)'
set ylabel 'peak above baseline, MiB'
set title "heavy_mlp:depth=20:hidden=4096:batch=32" noenhanced
plot 'pareto.dat' index 0 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 0 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 1 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
set title "heavy_mlp:depth=40:hidden=4096:batch=64" noenhanced
plot 'pareto.dat' index 2 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 2 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 3 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
set title "deep_mlp:depth=20:hidden=1024:batch=32" noenhanced
plot 'pareto.dat' index 4 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 4 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 5 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
set title "transformer:depth=6:hidden=768:heads=12:seq=256:batch=4:\ndropout=0.1" noenhanced
plot 'pareto.dat' index 6 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 6 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 7 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
set title "gpt2:size=small:depth=12:hidden=768:heads=12:seq=256:\nbatch=2:vocab=50257:context=1024:dropout=0.1" noenhanced
plot 'pareto.dat' index 8 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 8 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 9 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
set title "gpt2:size=medium:depth=24:hidden=1024:heads=16:seq=256:\nbatch=2:vocab=50257:context=1024:dropout=0.1" noenhanced
plot 'pareto.dat' index 10 using 1:2 with points pt 7 ps 1.4 title 'strategy', '' index 10 using 1:2:3 with labels offset 0,0.9 font ',8' noenhanced notitle, '' index 11 using 1:2 with linespoints lw 2 dt 2 pt 6 ps 2.2 title 'Pareto front'
unset multiplot
