// A memory header that reaches up into the model layer: the layer check must refuse it.
#include "model/model.h"
