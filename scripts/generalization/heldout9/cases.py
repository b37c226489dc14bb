"""Held-out test corpus: 8 bug pipelines and 12 clean pipelines (paths relative to this dir)."""


def A(*xs):
    return [str(x) for x in xs]


BUGS = [
    {
        "mechanism": "optimizer-wrong-params",
        "script": "pipelines/finetune_head_swap.py",
        "ranks": 1, "launcher": "python",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--optimizer", "adam", "--lr", 0.01)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "optimizer-wrong-params"),
        "fault_step": 0,
        "cause_names": ["head"],
        "clean": [A("--steps", 7, "--seed", 3, "--zero-grad", "top", "--set-to-none", 0),
                  A("--steps", 6, "--seed", 4, "--unfreeze-at", 3)],
    },
    {
        "mechanism": "no-zero-grad",
        "script": "pipelines/conv1d_signal_regressor.py",
        "ranks": 1, "launcher": "python",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--lr", 0.03)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "no-zero-grad"),
        "fault_step": 1,
        "cause_names": ["features.0", "features.3", "regressor"],
        "clean": [A("--steps", 7, "--seed", 3, "--accum", 2, "--zero-at", "after"),
                  A("--steps", 6, "--seed", 4, "--zero-via", "model", "--scheduler", "step")],
    },
    {
        "mechanism": "spectral-eval-first",
        "script": "pipelines/sn_critic.py",
        "ranks": 1, "launcher": "python",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--eval-every", 4)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "spectral-eval-first"),
        "fault_step": -1,
        "cause_names": ["fc1", "fc2", "out"],
        "clean": [A("--steps", 7, "--seed", 3, "--eval-at-start", 1, "--eval-every", 2),
                  A("--steps", 6, "--seed", 4, "--zero-grad", "model", "--betas", "0.5,0.999")],
    },
    {
        "mechanism": "ddp-dtype-roundtrip",
        "script": "pipelines/ddp_tabular_regression.py",
        "ranks": 2, "launcher": "torchrun",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--lr", 0.005)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "ddp-dtype-roundtrip"),
        "fault_step": 0,
        # names inside the DDP-wrapped module (DDP itself prefixes "module.")
        "cause_names": ["inp", "norm", "hidden", "out"],
        "clean": [A("--steps", 7, "--seed", 3, "--accum", 2, "--zero-grad", "top"),
                  A("--steps", 6, "--seed", 4, "--parity-check", 1)],
    },
    {
        "mechanism": "tp-clip-one-rank",
        "script": "pipelines/tp_mlp_lm.py",
        "ranks": 2, "launcher": "torchrun",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--log-interval", 1)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "tp-clip-one-rank"),
        "fault_step": 0,
        "cause_names": ["blocks.0.ln", "blocks.1.ln", "ln_f"],
        "clean": [A("--steps", 7, "--seed", 3, "--zero-grad", "after", "--grad-clip", 0),
                  A("--steps", 6, "--seed", 4, "--batch", 8, "--ctx", 12)],
    },
    {
        "mechanism": "autocast-escape",
        "script": "pipelines/bf16_tiny_encoder.py",
        "ranks": 1, "launcher": "python",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--lr", 0.003)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "autocast-escape"),
        "fault_step": 0,
        "cause_names": ["blocks.1.mlp", "blocks.1.mlp.fc1", "blocks.1.mlp.fc2"],
        "clean": [A("--steps", 7, "--seed", 3, "--accum", 2, "--clip", 1.0),
                  A("--steps", 6, "--seed", 4, "--warmup", 2)],
    },
    {
        "mechanism": "double-init",
        "script": "pipelines/resnet_fixup_init.py",
        "ranks": 1, "launcher": "python",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--lr", 0.1)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "double-init"),
        "fault_step": -1,
        "cause_names": ["stem"],
        "clean": [A("--steps", 7, "--seed", 3, "--accum", 2, "--sched", "none"),
                  A("--steps", 6, "--seed", 4, "--sched", "multistep", "--batch-size", 16)],
    },
    {
        "mechanism": "dropout-in-eval",
        "script": "pipelines/gru_text_classifier.py",
        "ranks": 1, "launcher": "python",
        "references": [A("--steps", 8, "--seed", 0),
                       A("--steps", 8, "--seed", 1, "--batch-size", 24)],
        "bug": A("--steps", 7, "--seed", 2, "--bug", "dropout-in-eval"),
        # first in-loop evaluation runs at the end of iteration 2 (--eval-every 3)
        "fault_step": 2,
        "cause_names": ["head"],
        "clean": [A("--steps", 7, "--seed", 3, "--eval-every", 2, "--clip", 1.0),
                  A("--steps", 6, "--seed", 4, "--optimizer", "sgd", "--eval-every", 0)],
    },
]

CLEAN = [
    {
        "name": "nanogpt_char",
        "script": "pipelines/nanogpt_char.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--gradient_accumulation_steps", 1, "--grad_clip", 0),
        "features": [
            "nanoGPT loop: tied-weight GPT, AdamW decay/no-decay groups, manual warmup+cosine lr written "
            "into param_group['lr'], 2 micro-steps of grad accumulation, clip_grad_norm_, "
            "zero_grad(set_to_none=True) after step, periodic estimate_loss under no_grad/eval",
            "variant: no gradient accumulation (1 micro-step per iteration) and clipping disabled",
        ],
    },
    {
        "name": "mnist_examples_cnn",
        "script": "pipelines/mnist_examples_cnn.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--optimizer", "sgd", "--batch-size", 16),
        "features": [
            "pytorch/examples MNIST structure: DataLoader over TensorDataset, Adadelta, StepLR per epoch, "
            "dropout, log_softmax + nll_loss, test() under torch.no_grad after every epoch (4 batches/epoch)",
            "variant: SGD+momentum instead of Adadelta and batch size 16 (8 batches/epoch, so no "
            "mid-run test pass and no StepLR step before the end)",
        ],
    },
    {
        "name": "word_lm_lstm",
        "script": "pipelines/word_lm_lstm.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--zero_grad_after", "--bptt", 5),
        "features": [
            "word_language_model LSTM: manual SGD p.data.add_(p.grad, alpha=-lr), model.zero_grad() at top, "
            "hidden-state repackage/detach across bptt chunks, clip_grad_norm_, lr /= 4 annealing on "
            "validation plateau with interleaved evaluation",
            "variant: model.zero_grad() after the manual update instead of before the forward, and bptt 5 "
            "instead of 8",
        ],
    },
    {
        "name": "hf_trainer_style",
        "script": "pipelines/hf_trainer_style.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--gradient-accumulation-steps", 1, "--eval-steps", 3),
        "features": [
            "HF-Trainer-like loop: dict batches via collate_fn, TransformerEncoder classifier, AdamW with "
            "no-decay groups, linear warmup LambdaLR, gradient accumulation 2, clip, model.zero_grad() after "
            "each optimizer step, evaluate() every 4 optimizer steps",
            "variant: no gradient accumulation and evaluation every 3 steps instead of 4",
        ],
    },
    {
        "name": "resume_from_checkpoint",
        "script": "pipelines/resume_from_checkpoint.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--save-every", 2, "--resume-at", 5),
        "features": [
            "torch.save/torch.load of model+optimizer+scheduler+RNG state into a private tempdir every k "
            "steps, Adam + CosineAnnealingLR, zero_grad(set_to_none=True) at top",
            "variant: checkpoints every 2 steps and at step 5 rebuilds model/optimizer/scheduler from the "
            "step-4 checkpoint and replays step 4 (mid-run reload)",
        ],
    },
    {
        "name": "multitask_heads",
        "script": "pipelines/multitask_heads.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--set-to-none", 0, "--zero-grad-at", "top"),
        "features": [
            "shared trunk with three task heads in a ModuleDict; one task per step (round robin) so two "
            "heads get no grad each step; auxiliary decoder used only on even steps; Adam",
            "variant: zero_grad(set_to_none=False) at the top of the iteration instead of set_to_none=True "
            "after the step (unused heads keep zero grads and Adam still moves them via momentum)",
        ],
    },
    {
        "name": "staged_unfreeze",
        "script": "pipelines/staged_unfreeze.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--unfreeze-at", 0, "--freeze-embedding-steps", 3),
        "features": [
            "gradual unfreezing: pretrained conv encoder frozen (requires_grad False, BN in eval) for the "
            "first 3 steps while only the classifier trains, then encoder+embedding join with a "
            "discriminative lr param group; AdamW",
            "variant: encoder trainable from step 0, only the embedding frozen for the first 3 steps",
        ],
    },
    {
        "name": "gan_ring",
        "script": "pipelines/gan_ring.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--d_iters", 2, "--zero_grad", "optimizer"),
        "features": [
            "two models / two Adam optimizers (DCGAN example loop): D step on real + fake.detach(), "
            "G step through D, netD.zero_grad()/netG.zero_grad() module-level clearing",
            "variant: two discriminator updates per generator update and optimizer.zero_grad() instead of "
            "module.zero_grad()",
        ],
    },
    {
        "name": "ddp_bn_classifier",
        "script": "pipelines/ddp_bn_classifier.py",
        "ranks": 2, "launcher": "torchrun",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--accum", 2, "--zero-grad", "top"),
        "features": [
            "2-rank DDP (gloo) with BatchNorm buffers broadcast, DistributedSampler + set_epoch, SGD momentum, "
            "MultiStepLR, zero_grad(set_to_none=True) after step",
            "variant: gradient accumulation over 2 micro-batches using model.no_sync() for the first, and "
            "zero_grad at the top of each accumulation window",
        ],
    },
    {
        "name": "transformer_onecycle",
        "script": "pipelines/transformer_onecycle.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--scheduler", "none", "--seq-len", 8),
        "features": [
            "nn.TransformerEncoder (norm_first, causal mask) token tagger, Adam + OneCycleLR stepped per "
            "batch, zero_grad between forward and backward, evaluation every 4 steps",
            "variant: no lr scheduler (constant lr) and sequence length 8 instead of 12",
        ],
    },
    {
        "name": "vae_kl_anneal",
        "script": "pipelines/vae_kl_anneal.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--eval-every", 0, "--zero-grad", "model"),
        "features": [
            "VAE with reparameterisation (train) vs mean code (eval), linear KL annealing of beta, Adam, "
            "test ELBO every 2 steps",
            "variant: no interleaved evaluation (only final) and model.zero_grad() instead of "
            "optimizer.zero_grad()",
        ],
    },
    {
        "name": "ema_cnn",
        "script": "pipelines/ema_cnn.py",
        "ranks": 1, "launcher": "python",
        "reference": A("--steps", 8, "--seed", 0),
        "variant": A("--steps", 7, "--seed", 1, "--optimizer", "adamw", "--grad-clip", 2.0),
        "features": [
            "BatchNorm CNN with an EMA copy (swa_utils.AveragedModel, use_buffers=True) updated after every "
            "step, SGD nesterov, label smoothing, EMA model evaluated at the end",
            "variant: AdamW instead of SGD and gradient clipping (max norm 2.0) enabled",
        ],
    },
]
