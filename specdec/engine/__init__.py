"""The speculative decoding engine: one batched loop, where one clip is a batch of one.

    windows.WindowBatch      the seek loop over many clips: their windows as rows of one batch, clips
                             joining at any step (windows.decode_clips: N clips to the end)
      clip_decoding          one clip's way through the seek loop: its next row, what a window keeps
      loop.Batch             one step: propose -> verify -> accept -> roll back -> record -> drop
        drafters             who proposes (the draft model, the previous hypothesis, a plug-in)
        draft_length         how many (fixed, adaptive, cost-aware, load-aware)
        acceptance           the rules (greedy, Leviathan et al. rejection sampling, the lossy relaxation):
                             pure tensor code
        cache                each model's decoder with per-row KV caches (feed / roll back / keep rows)
          step               the one decoder step: tokens at explicit positions -> logits (the target's
                             exact layers; lean_decoder: a draft's fused ones)
          replay             fixed shapes (rows in slots, the whole context, padded feeds) and each step
                             replayed as a CUDA graph, installed only by an explicit `replay.enable`
        kernels              packed CPU weights, installed only by an explicit `kernels.pack`
        fast_draft           a cheaper draft (int8, a restricted vocabulary, audio-only encoding)
        compute_types        the target's encoder in bfloat16 or int8 on a CPU (a converted copy)
      state                  a row, and the clock that numbers passes and encoder calls
      host                   numbers between the host and the device, read once a pass
      cancel                 a cancellation scope: a decoding stops at its next pass

The engine imports only `specdec.whisper`, `specdec.options`, `specdec.trace`, `specdec.audio` and
`specdec.internals` (the private torch and transformers APIs, each with why).
"""
