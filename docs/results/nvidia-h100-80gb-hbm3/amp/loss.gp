set terminal pngcairo size 1280,420 font ',9'
set output 'loss.png'
set multiplot layout 1,2 title 'Training loss per optimizer step: every strategy on top of store\_all'
set grid
set key outside bottom center horizontal
set xlabel 'optimizer step'
set ylabel 'loss'
set title 'transformer:depth=4:hidden=256:heads=4:seq=128:batch=8:dropout=0.1' noenhanced
plot 'loss.dat' index 0 using 1:2 with lines lw 4 dt 1 title 'store_all' noenhanced, 'loss.dat' index 1 using 1:2 with lines lw 2 dt 2 title 'uniform:segments=3' noenhanced, 'loss.dat' index 2 using 1:2 with lines lw 2 dt 3 title 'recompute_all' noenhanced, 'loss.dat' index 3 using 1:2 with lines lw 2 dt 4 title 'selective_attention' noenhanced, 'loss.dat' index 4 using 1:2 with lines lw 2 dt 5 title 'chunked_sequence:chunks=4' noenhanced
set title 'gpt2:size=small:depth=4:hidden=256:heads=4:seq=128:batch=8:vocab=8192:context=128:dropout=0.1' noenhanced
plot 'loss.dat' index 5 using 1:2 with lines lw 4 dt 1 title 'store_all' noenhanced, 'loss.dat' index 6 using 1:2 with lines lw 2 dt 2 title 'uniform:segments=4' noenhanced, 'loss.dat' index 7 using 1:2 with lines lw 2 dt 3 title 'recompute_all' noenhanced, 'loss.dat' index 8 using 1:2 with lines lw 2 dt 4 title 'selective_attention' noenhanced, 'loss.dat' index 9 using 1:2 with lines lw 2 dt 5 title 'chunked_sequence:chunks=4' noenhanced
unset multiplot
