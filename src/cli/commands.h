// The subcommands of the `dspark` binary; each takes the arguments after its name.
#pragma once

namespace dspark {

int cmd_generate(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_model(int argc, char** argv);
int cmd_corpus(int argc, char** argv);
int cmd_tokenizer(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_datagen(int argc, char** argv);
int cmd_calibrate(int argc, char** argv);
int cmd_drafter(int argc, char** argv);

}  // namespace dspark
