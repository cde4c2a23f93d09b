// `minigpt train`'s command line: its options, and the words among them that become settings
// once read. Apart from main.cpp so that it can be used without running a program (the option
// parser's fuzz target, tests/fuzz/options_fuzz.cpp, reads command lines with it).
#include <fmt/format.h>

#include <boost/program_options.hpp>

#include "../common/cli.h"
#include "../common/kernels_option.h"
#include "../common/precision_option.h"
#include "../common/preflight.h"
#include "minigpt.h"

namespace po = boost::program_options;
using ag::examples::refuse;
using ag::examples::with_default;

namespace minigpt {

po::options_description train_options(TrainOptions& o, TrainWords& words) {
  po::options_description opts(
      "minigpt train: train a character-level GPT (defaults finish in under a minute on 2 cores)");
  opts.add_options()("help,h", "show this help")(
      "corpus", po::value(&o.corpus)->multitoken(),
      "UTF-8 text files to train on (default: the English fortunes in /usr/share/games/fortunes, from Debian's "
      "`fortunes`; for Chinese, the Tang poems of `fortunes-zh`: --corpus /usr/share/games/fortunes/tang300)")(
      "out", with_default(&o.out_dir), "directory for the checkpoint and the pictures")(
      "steps", with_default(&o.steps), "optimizer steps")("batch", with_default(&o.batch), "windows per batch")(
      "block", with_default(&o.model.block_size), "context length in characters")(
      "layers", with_default(&o.model.n_layer), "Transformer blocks")(
      "heads", with_default(&o.model.n_head), "attention heads per block")("embd", with_default(&o.model.n_embd),
                                                                           "width of the residual stream")(
      "norm", with_default(&words.norm),
      "normalisation in every block and before the head: layer (LayerNorm, GPT-2's) or rms (RMSNorm, LLaMA's)")(
      "mlp", with_default(&words.mlp),
      "each block's MLP: gelu (4 x embd, GELU, GPT-2's) or swiglu (SwiGLU of about 8/3 x embd, no biases, "
      "LLaMA's)")("dropout", with_default(&o.model.dropout), "dropout probability")(
      "lr", with_default(&o.lr), "peak learning rate")("min-lr", with_default(&o.min_lr),
                                                       "learning rate at the end of the cosine")(
      "warmup", with_default(&o.warmup),
      "warm-up steps, at most --steps (unless given: 100, or --steps when fewer; on --resume, the run's)")(
      "weight-decay", with_default(&o.weight_decay), "AdamW weight decay (matrices only)")(
      "eval-interval", with_default(&o.eval_interval),
      "steps between validation estimates (each also writes a checkpoint)")(
      "checkpoint-interval", with_default(&o.checkpoint_interval), "steps between checkpoints")(
      "eval-batches", with_default(&o.eval_batches), "batches per validation estimate")(
      "seed", ag::examples::seed_value(&o.seed), "seed for initialisation, batches and sampling")(
      "prompt", po::value(&o.prompt), "text for the attention maps (default: a stretch of validation text)")(
      "sample-tokens", with_default(&o.sample_tokens), "length of the final sample")(
      "resume", po::bool_switch(&o.resume),
      "continue the run in --out from its last checkpoint, with its model and training options (which may be left "
      "out)")("overwrite", po::bool_switch(&o.overwrite),
              "replace the run in --out (without this or --resume, one there is refused)")(
      "new-corpus", po::bool_switch(&o.new_corpus),
      "with --resume: continue on a --corpus other than the one the run trained on (else refused)")(
      "grad-accum", with_default(&o.grad_accum),
      "micro-batches of --batch windows per step, their gradients summed in order (under mpirun, each process is "
      "one: docs/distributed.md)")("sync-every", with_default(&o.sync_check_interval),
                                   "under mpirun: steps between checks that every process holds the same weights")(
      "trace", po::value(&o.trace),
      "write every op's output and gradient, and the weights after each update, to this file for `minigpt "
      "bisect` (under mpirun, rank R > 0 writes FILE.rankR); it grows with every op: for a few steps")(
      "kernels", ag::examples::kernels_value(), ag::examples::kKernelsHelp)(
      "precision", ag::examples::precision_value(&words.precision), ag::examples::kPrecisionHelp);
  return opts;
}

void apply_train_words(TrainOptions& o, const TrainWords& words) {
  if (words.norm != "layer" && words.norm != "rms") refuse("--norm must be layer or rms, got '{}'", words.norm);
  o.model.norm = ag::nn::parse_norm(words.norm);
  if (words.mlp != "gelu" && words.mlp != "swiglu") refuse("--mlp must be gelu or swiglu, got '{}'", words.mlp);
  o.model.mlp = ag::nn::parse_mlp(words.mlp);
  o.precision = ag::examples::apply_precision(words.precision, false);  // train prints it with the run's settings
}

std::string trace_file(const std::string& trace, int rank) {
  return rank == 0 ? trace : fmt::format("{}.rank{}", trace, rank);
}

}  // namespace minigpt
