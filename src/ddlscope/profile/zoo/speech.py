"""Speech: wav2vec 2.0 base with a CTC head, from a Hugging Face configuration (no weights)."""

from __future__ import annotations

import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CTC_VOCAB = 32
"""Output characters of the LibriSpeech fine-tuning (fairseq's letter dictionary, with blank)."""
SAMPLES_PER_TARGET = 320 * 4
"""Audio samples per target character for the example batch: one character per four 20 ms frames
(320 samples at 16 kHz), about 12 characters per second of speech."""

_LIB: torch.library.Library | None = None


def _register_ctc_meta() -> None:
    """Meta kernels for ``aten::_ctc_loss.Tensor`` and its backward, which PyTorch lacks, so a CTC
    loss traces on the meta device. Shapes from ``aten/src/ATen/native/LossCTC.cpp``: the loss is
    ``(B,)`` and the forward variables ``log_alpha`` are ``(B, T, 2 * max_target_length + 1)``;
    the backward returns a gradient shaped like ``log_probs``. Padded 2-D targets only."""
    global _LIB
    if _LIB is not None or torch._C._dispatch_has_kernel_for_dispatch_key("aten::_ctc_loss.Tensor", "Meta"):
        return
    lib = torch.library.Library("aten", "IMPL")

    def ctc(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
        t, b = log_probs.shape[0], log_probs.shape[1]
        if targets.dim() != 2:
            raise NotImplementedError("ctc_loss on the meta device needs padded 2-D targets (B, S)")
        return (log_probs.new_empty(b), log_probs.new_empty(b, t, 2 * targets.shape[1] + 1))

    def ctc_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha, blank,
                     zero_infinity=False):
        return log_probs.new_empty(log_probs.shape)

    lib.impl("_ctc_loss.Tensor", ctc, "Meta")
    lib.impl("_ctc_loss_backward.Tensor", ctc_backward, "Meta")
    _LIB = lib


class Wav2Vec2CTC(nn.Module):
    """wav2vec 2.0 (Hugging Face ``Wav2Vec2Model``) + dropout + linear CTC head, CTC loss (mean).

    The convolutional feature encoder is frozen, as in the paper's fine-tuning (Baevski et al.,
    NeurIPS 2020, sec. 4.2). SpecAugment-style time masking and LayerDrop are off: both draw random
    numbers that steer Python control flow, which a meta-device trace cannot follow; their cost is
    a few element-wise ops.

    ``forward(input_values (B, samples) float, labels (B, S) int64)`` returns the loss.
    """

    def __init__(self) -> None:
        super().__init__()
        import transformers

        transformers.logging.set_verbosity_error()
        config = transformers.Wav2Vec2Config(vocab_size=CTC_VOCAB, mask_time_prob=0.0, apply_spec_augment=False,
                                             layerdrop=0.0)
        self.wav2vec2 = transformers.Wav2Vec2Model(config)
        self.wav2vec2.freeze_feature_encoder()
        self.dropout = nn.Dropout(config.final_dropout)
        self.lm_head = nn.Linear(config.hidden_size, CTC_VOCAB)

    def forward(self, input_values: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """CTC loss of the batch, averaged over target lengths (a scalar)."""
        hidden = self.wav2vec2(input_values).last_hidden_state
        log_probs = F.log_softmax(self.lm_head(self.dropout(hidden)), dim=-1).transpose(0, 1)  # (T, B, C)
        frames, b = log_probs.shape[0], log_probs.shape[1]
        input_lengths = torch.full((b,), frames, dtype=torch.long, device=log_probs.device)
        target_lengths = torch.full((b,), labels.shape[1], dtype=torch.long, device=log_probs.device)
        return F.ctc_loss(log_probs, labels, input_lengths, target_lengths, blank=0, zero_infinity=True)


def wav2vec2_base(batch_size: int = 8, seq_len: int = 240_000) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """wav2vec 2.0 base + CTC and ``batch_size`` utterances of ``seq_len`` 16 kHz samples with
    padded character targets (``seq_len / 1280`` characters)."""
    _register_ctc_meta()
    targets = max(1, seq_len // SAMPLES_PER_TARGET)
    return Wav2Vec2CTC(), (torch.empty(batch_size, seq_len), torch.ones(batch_size, targets, dtype=torch.long))


# -- Tacotron 2 and WaveGlow (NVIDIA DeepLearningExamples PyTorch/SpeechSynthesis/Tacotron2) -------
N_MELS = 80
"""Mel channels of both models (22,050 Hz audio, 1,024-point STFT, hop 256)."""
TACOTRON2_SYMBOLS = 148
"""Input symbols of DeepLearningExamples' English text front end (``n_symbols``)."""


class _ConvBN(nn.Sequential):
    def __init__(self, cin: int, cout: int, kernel: int = 5):
        super().__init__(nn.Conv1d(cin, cout, kernel, padding=kernel // 2), nn.BatchNorm1d(cout))


class Tacotron2(nn.Module):
    """Tacotron 2 (Shen et al., "Natural TTS Synthesis by Conditioning WaveNet on Mel Spectrogram
    Predictions", ICASSP 2018) as DeepLearningExamples defines it (``tacotron2/model.py``,
    ``n_frames_per_step = 1``): 512-wide character embedding; encoder of three 5-wide 512-channel
    convolutions with batch norm, ReLU and dropout 0.5, then a bidirectional LSTM of 256 per
    direction; decoder run once per mel frame with teacher forcing: pre-net 80-256-256 (ReLU,
    dropout 0.5 always on), attention LSTMCell (256 + 512 -> 1,024), location-sensitive attention
    (query 1,024 -> 128, memory 512 -> 128, 32 location filters of width 31 over the previous and
    cumulative weights), decoder LSTMCell (1,024 + 512 -> 1,024), mel projection (1,536 -> 80) and
    stop-token gate (1,536 -> 1), dropout 0.1 on both cells' states; post-net of five 5-wide
    convolutions (80-512-512-512-512-80, batch norm, tanh except the last, dropout 0.5). Loss: MSE of
    the mel frames before and after the post-net plus the gate's binary cross-entropy.

    The per-frame decoder is Python-level as in DeepLearningExamples, so a step has one set of small
    ops per mel frame (LSTMCell does not go through the fused cuDNN RNN on a GPU either). No padding:
    every utterance has ``text_len`` symbols and ``frames`` mel frames.

    ``forward(text (B, N) int64, mels (B, 80, T), gate (B, T)) -> loss``.
    """

    def __init__(self, symbols: int = TACOTRON2_SYMBOLS, emb: int = 512, rnn: int = 1024, prenet: int = 256,
                 att: int = 128, filters: int = 32, kernel: int = 31):
        super().__init__()
        self.embedding = nn.Embedding(symbols, emb)
        self.encoder_convs = nn.ModuleList(_ConvBN(emb, emb) for _ in range(3))
        self.encoder_lstm = nn.LSTM(emb, emb // 2, batch_first=True, bidirectional=True)
        self.prenet = nn.ModuleList([nn.Linear(N_MELS, prenet, bias=False), nn.Linear(prenet, prenet, bias=False)])
        self.attention_rnn = nn.LSTMCell(prenet + emb, rnn)
        self.query_layer = nn.Linear(rnn, att, bias=False)
        self.memory_layer = nn.Linear(emb, att, bias=False)
        self.v = nn.Linear(att, 1, bias=False)
        self.location_conv = nn.Conv1d(2, filters, kernel, padding=kernel // 2, bias=False)
        self.location_dense = nn.Linear(filters, att, bias=False)
        self.decoder_rnn = nn.LSTMCell(rnn + emb, rnn)
        self.linear_projection = nn.Linear(rnn + emb, N_MELS)
        self.gate_layer = nn.Linear(rnn + emb, 1)
        self.postnet = nn.ModuleList([_ConvBN(N_MELS, 512), _ConvBN(512, 512), _ConvBN(512, 512), _ConvBN(512, 512),
                                      _ConvBN(512, N_MELS)])
        self.rnn, self.emb = rnn, emb

    def _encode(self, text: torch.Tensor) -> torch.Tensor:
        x = self.embedding(text).transpose(1, 2)
        for conv in self.encoder_convs:
            x = F.dropout(F.relu(conv(x)), 0.5, self.training)
        return self.encoder_lstm(x.transpose(1, 2))[0]  # (B, N, 512)

    def forward(self, text: torch.Tensor, mels: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """Tacotron 2's training loss (a scalar)."""
        memory = self._encode(text)
        b, n, _ = memory.shape
        processed_memory = self.memory_layer(memory)
        frames = mels.shape[2]
        prev = torch.cat([mels.new_zeros(b, N_MELS, 1), mels[:, :, :-1]], dim=2).permute(2, 0, 1)  # teacher forcing
        for layer in self.prenet:
            prev = F.dropout(F.relu(layer(prev)), 0.5, True)
        h_att = c_att = h_dec = c_dec = memory.new_zeros(b, self.rnn)
        weights = cum = memory.new_zeros(b, n)
        context = memory.new_zeros(b, self.emb)
        outs, gates = [], []
        for t in range(frames):
            h_att, c_att = self.attention_rnn(torch.cat([prev[t], context], -1), (h_att, c_att))
            h_att = F.dropout(h_att, 0.1, self.training)
            loc = self.location_dense(self.location_conv(torch.stack([weights, cum], 1)).transpose(1, 2))
            energies = self.v(torch.tanh(self.query_layer(h_att).unsqueeze(1) + loc + processed_memory)).squeeze(-1)
            weights = F.softmax(energies, dim=1)
            cum = cum + weights
            context = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
            h_dec, c_dec = self.decoder_rnn(torch.cat([h_att, context], -1), (h_dec, c_dec))
            h_dec = F.dropout(h_dec, 0.1, self.training)
            out = torch.cat([h_dec, context], -1)
            outs.append(self.linear_projection(out))
            gates.append(self.gate_layer(out))
        mel_out = torch.stack(outs, 2)  # (B, 80, T)
        gate_out = torch.cat(gates, 1)
        x = mel_out
        for i, conv in enumerate(self.postnet):
            x = conv(x)
            x = F.dropout(torch.tanh(x) if i < len(self.postnet) - 1 else x, 0.5, self.training)
        post = mel_out + x
        return F.mse_loss(mel_out, mels) + F.mse_loss(post, mels) + F.binary_cross_entropy_with_logits(gate_out, gate)


def tacotron2(batch_size: int = 48, seq_len: int = 566,
              text_len: int = 100) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Tacotron 2 and ``batch_size`` utterances of ``text_len`` symbols and ``seq_len`` mel frames.

    Defaults: LJSpeech (Ito 2017: 13,100 clips, 23.92 hours) averages 6.57 s a clip, 6.57 x 22,050 /
    256 = 566 frames; 100 symbols per clip is our stated assumption (about 15 characters a second).
    """
    return Tacotron2(), (torch.zeros(batch_size, text_len, dtype=torch.long), torch.empty(batch_size, N_MELS, seq_len),
                         torch.zeros(batch_size, seq_len))


class WN(nn.Module):
    """WaveGlow's affine-coupling network (a non-causal WaveNet; DeepLearningExamples
    ``waveglow/model.py``): a weight-normalised 1x1 start convolution to ``channels``, ``layers``
    dilated (2^i) width-3 convolutions to ``2 x channels`` added to a per-layer weight-normalised
    1x1 conditioning convolution of the upsampled mel, gated ``tanh x sigmoid``, weight-normalised
    1x1 residual/skip convolutions (the last one skip only), and a 1x1 end convolution to ``2 x
    n_in`` (log-scale and shift)."""

    def __init__(self, n_in: int, n_cond: int, layers: int = 8, channels: int = 256, kernel: int = 3):
        super().__init__()
        def wn(module: nn.Module) -> nn.Module:
            # DeepLearningExamples' WaveGlow uses the classic hook (weight_g/weight_v parameters)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                return nn.utils.weight_norm(module)

        self.layers, self.channels = layers, channels
        self.start = wn(nn.Conv1d(n_in, channels, 1))
        self.end = nn.Conv1d(channels, 2 * n_in, 1)
        self.cond_layers = nn.ModuleList(wn(nn.Conv1d(n_cond, 2 * channels, 1)) for _ in range(layers))
        self.in_layers = nn.ModuleList(wn(nn.Conv1d(channels, 2 * channels, kernel, dilation=2**i,
                                                    padding=(kernel * 2**i - 2**i) // 2)) for i in range(layers))
        self.res_skip_layers = nn.ModuleList(wn(nn.Conv1d(channels, 2 * channels if i < layers - 1 else channels, 1))
                                             for i in range(layers))

    def forward(self, audio: torch.Tensor, spect: torch.Tensor) -> torch.Tensor:
        """``audio (B, n_in, L)``, ``spect (B, n_cond, L)`` -> ``(B, 2 n_in, L)``."""
        audio = self.start(audio)
        c = self.channels
        output: torch.Tensor | None = None
        for i in range(self.layers):
            acts = self.in_layers[i](audio) + self.cond_layers[i](spect)
            acts = torch.tanh(acts[:, :c]) * torch.sigmoid(acts[:, c:])
            res_skip = self.res_skip_layers[i](acts)
            if i < self.layers - 1:
                audio = res_skip[:, :c] + audio
                skip = res_skip[:, c:]
            else:
                skip = res_skip
            output = skip if output is None else skip + output
        return self.end(output)


class WaveGlow(nn.Module):
    """WaveGlow (Prenger, Valle and Catanzaro, "WaveGlow: A Flow-based Generative Network for Speech
    Synthesis", ICASSP 2019) with DeepLearningExamples' defaults (``waveglow/arg_parser.py``): 12
    flows over groups of 8 audio samples, 2 channels output early every 4 flows, invertible 1x1
    convolutions, WN of 8 layers and 512 channels (``--wn-channels 512``; the paper's 87.88 M
    parameters are NVIDIA/waveglow's 256 channels); the mel upsampled by a transposed convolution
    (80 channels, width 1,024, stride 256). Training loss: ``sum(z^2) / (2 sigma^2) - sum(log s) -
    sum(log det W)`` over all elements, sigma = 1.

    ``forward(mel (B, 80, frames), audio (B, samples)) -> loss``; ``samples`` a multiple of 8 and at most
    ``frames x 256``.
    """

    def __init__(self, flows: int = 12, group: int = 8, early_every: int = 4, early_size: int = 2,
                 layers: int = 8, channels: int = 512):
        super().__init__()
        self.upsample = nn.ConvTranspose1d(N_MELS, N_MELS, 1024, stride=256)
        self.group, self.early_every, self.early_size = group, early_every, early_size
        self.convinv = nn.ParameterList()
        self.wn = nn.ModuleList()
        remaining = group
        for k in range(flows):
            if k % early_every == 0 and k > 0:
                remaining -= early_size
            self.convinv.append(nn.Parameter(torch.empty(remaining, remaining, 1)))
            self.wn.append(WN(remaining // 2, N_MELS * group, layers, channels))

    def forward(self, mel: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        """WaveGlow's negative log-likelihood per element (a scalar)."""
        b, g = audio.shape[0], self.group
        spect = self.upsample(mel)[:, :, :audio.shape[1]]
        spect = spect.unfold(2, g, g).permute(0, 2, 1, 3).contiguous().view(b, audio.shape[1] // g, -1)
        spect = spect.permute(0, 2, 1)
        audio = audio.unfold(1, g, g).permute(0, 2, 1)  # (B, 8, L / 8)
        outputs, log_s_total, log_det_total = [], 0.0, 0.0
        for k, (w, wn) in enumerate(zip(self.convinv, self.wn, strict=True)):
            if k % self.early_every == 0 and k > 0:
                outputs.append(audio[:, :self.early_size])
                audio = audio[:, self.early_size:]
            log_det_total = log_det_total + b * audio.shape[2] * torch.logdet(w.squeeze(-1).float())
            audio = F.conv1d(audio, w)
            half = audio.shape[1] // 2
            out = wn(audio[:, :half], spect)
            log_s, shift = out[:, half:], out[:, :half]
            audio = torch.cat([audio[:, :half], torch.exp(log_s) * audio[:, half:] + shift], 1)
            log_s_total = log_s_total + log_s.sum()
        z = torch.cat([*outputs, audio], 1)
        return ((z * z).sum() / 2 - log_s_total - log_det_total) / z.numel()


WAVEGLOW_HOP = 256


def waveglow(batch_size: int = 8, seq_len: int = 8000) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """WaveGlow and ``batch_size`` audio segments of ``seq_len`` samples (22,050 Hz) with their mel
    spectrograms (``seq_len / 256 + 1`` frames, as the STFT with hop 256 gives).

    Raises:
        ValueError: ``seq_len`` not a multiple of the group size 8.
    """
    if seq_len % 8:
        raise ValueError(f"seq_len: WaveGlow groups 8 audio samples; {seq_len} is not a multiple of 8")
    frames = seq_len // WAVEGLOW_HOP + 1
    return WaveGlow(), (torch.empty(batch_size, N_MELS, frames), torch.empty(batch_size, seq_len))


# -- DeepSpeech 2 (Amodei et al. 2016) as deepspeech.pytorch defines it ---------------------------
DS2_LABELS = 29
"""Output characters of deepspeech.pytorch's English ``labels.json``: blank, apostrophe, A-Z, space."""
DS2_FREQ_BINS = 161
"""Spectrogram bins: a 20 ms Hamming window at 16 kHz (320 samples) gives 320 / 2 + 1 = 161."""


class DeepSpeech2(nn.Module):
    """DeepSpeech 2 (Amodei et al., "Deep Speech 2: End-to-End Speech Recognition in English and
    Mandarin", ICML 2016) in the configuration of SeanNaren/deepspeech.pytorch
    (``deepspeech_pytorch/model.py`` with ``BiDirectionalConfig``): two 2-D convolutions over the
    161-bin spectrogram (32 channels, 41 x 11 stride 2 x 2 and 21 x 11 stride 2 x 1, batch norm,
    hardtanh 0-20), five bidirectional LSTMs of 1,024 (the directions summed; batch norm before all
    but the first), batch norm and a bias-free 1,024 x 29 classifier, CTC loss summed over the batch.
    Every utterance is full length (no masking or packing).

    ``forward(spect (B, 1, 161, T), targets (B, S) int64) -> loss``.
    """

    def __init__(self, hidden: int = 1024, layers: int = 5, labels: int = DS2_LABELS):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 32, (41, 11), stride=(2, 2), padding=(20, 5)), nn.BatchNorm2d(32),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(32, 32, (21, 11), stride=(2, 1), padding=(10, 5)), nn.BatchNorm2d(32),
            nn.Hardtanh(0, 20, inplace=True))
        freq = (DS2_FREQ_BINS + 2 * 20 - 41) // 2 + 1
        freq = (freq + 2 * 10 - 21) // 2 + 1
        self.rnns = nn.ModuleList(nn.LSTM(32 * freq if i == 0 else hidden, hidden, bidirectional=True)
                                  for i in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers - 1))
        self.fc_norm = nn.BatchNorm1d(hidden)
        self.fc = nn.Linear(hidden, labels, bias=False)
        self.hidden = hidden

    def forward(self, spect: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """CTC loss of the batch, summed (a scalar)."""
        x = self.conv(spect)
        b, c, f, t = x.shape
        x = x.view(b, c * f, t).permute(2, 0, 1).contiguous()  # (T, B, H)
        for i, rnn in enumerate(self.rnns):
            if i > 0:
                x = self.norms[i - 1](x.view(t * b, -1)).view(t, b, -1)
            x = rnn(x)[0].view(t, b, 2, self.hidden).sum(2)
        logits = self.fc(self.fc_norm(x.view(t * b, -1))).view(t, b, -1)
        log_probs = logits.log_softmax(-1)
        input_lengths = torch.full((b,), t, dtype=torch.long, device=x.device)
        target_lengths = torch.full((b,), targets.shape[1], dtype=torch.long, device=x.device)
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="sum",
                          zero_infinity=True)


def deepspeech2(batch_size: int = 64, seq_len: int = 1230) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """DeepSpeech 2 and ``batch_size`` utterances of ``seq_len`` spectrogram frames (10 ms each) with
    padded character targets (``seq_len / 6``: about 16 characters a second).

    Defaults: deepspeech.pytorch's batch 64; LibriSpeech's 960 training hours in 281,241 utterances
    average 12.3 s, 1,230 frames."""
    _register_ctc_meta()
    targets = max(1, seq_len // 6)
    return DeepSpeech2(), (torch.empty(batch_size, 1, DS2_FREQ_BINS, seq_len),
                           torch.ones(batch_size, targets, dtype=torch.long))
