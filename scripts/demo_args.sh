#!/bin/sh
# The flags `make demo` gives each step on the bundled sample (a few MB of text).
case "$1" in
  download_data)   echo "--dataset sample" ;;
  train_tokenizer) echo "--vocab-size 8000" ;;
  *)               echo "" ;;
esac
