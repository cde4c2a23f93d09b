// gpt_grads: the attograd side of the PyTorch parity check (tools/pytorch_parity.py).
//
// Reads a GPT checkpoint (safetensors, nanoGPT names, config in the metadata), token ids and
// targets (.npy, int64 [B, T]); computes the mean cross-entropy loss and every parameter's
// gradient in float64; writes them as safetensors under nanoGPT's names, with the loss in the
// metadata ("loss", printed with 17 significant digits).
//
//   gpt_grads MODEL.safetensors IDS.npy TARGETS.npy OUT.safetensors [RESAVED.safetensors]
//
// With RESAVED it also writes the loaded model back with save_gpt, in float64, so the other
// direction (attograd's file into PyTorch) can be checked too.
#include <attograd/attograd.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: gpt_grads MODEL.safetensors IDS.npy TARGETS.npy OUT.safetensors [RESAVED.safetensors]\n";
    return 2;
  }
  try {
    ag::io::GPTCheckpoint ckpt = ag::io::read_gpt_checkpoint(argv[1]);
    ag::nn::GPT model(ckpt.config);
    model.to(ag::kFloat64);
    ag::io::load_gpt(model, ckpt);
    ag::Tensor ids = ag::io::load_npy(argv[2]), targets = ag::io::load_npy(argv[3]);
    ag::Tensor loss = model.loss(ids, targets);
    loss.backward();
    ag::io::save_safetensors(argv[4], ag::io::gpt_state_dict(model, /*gradients=*/true),
                             {{"loss", fmt::format("{:.17g}", loss.item())}});
    if (argc == 6) ag::io::save_gpt(argv[5], model, ag::data::CharTokenizer(ckpt.vocab));
  } catch (const std::exception& e) {
    std::cerr << "gpt_grads: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
