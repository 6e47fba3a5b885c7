#!/usr/bin/env bash
# Example clips for the demo and the benchmark, spoken by espeak-ng (apt-get install espeak-ng sox).
# Each clip has its reference text beside it (CLIP.txt). Re-run to regenerate assets/.
set -euo pipefail
cd "$(dirname "$0")/../assets"
say() {  # name voice text
  printf '%s\n' "$3" > "$1.txt"
  espeak-ng -v "$2" -s 150 -w "$1.raw.wav" "$3"
  sox "$1.raw.wav" -r 16000 -c 1 -b 16 "$1.wav" && rm "$1.raw.wav"
}
say en-fellow-americans en-us "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
say en-weather en-gb "The weather today is cool and bright, with a light wind from the west and a chance of rain this evening."
say de-bahnhof de "Der Zug nach Berlin fährt heute um halb neun von Gleis drei ab."
say fr-marche fr "Le marché ouvre tous les samedis matin sur la place de l'église."
say es-biblioteca es "La biblioteca de la ciudad cierra a las ocho de la tarde durante el verano."
# a minute of dense English in six parts (one a line in its .txt), for long streams and long-form; kept in
# long/ so that the benchmarks' short-clip sets (assets/*.wav, en-*.flac) stay as they are
mkdir -p long
espeak-ng -v en-us -s 160 -f long/en-six-parts.txt -w long/en-six-parts.raw.wav
sox long/en-six-parts.raw.wav -r 16000 -c 1 -b 16 long/en-six-parts.flac && rm long/en-six-parts.raw.wav
# five minutes of a talk (a town's history, one paragraph a line), for the live stream's long run (the
# Live view's fake microphone too); Ogg Vorbis keeps it at 1.2 MB
espeak-ng -v en-us -s 160 -f long/en-talk.txt -w long/en-talk.raw.wav
sox long/en-talk.raw.wav -r 16000 -c 1 -b 16 -C 2 long/en-talk.ogg && rm long/en-talk.raw.wav
