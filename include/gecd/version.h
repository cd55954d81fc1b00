#ifndef GECD_VERSION_H_
#define GECD_VERSION_H_

// gecd's version: the one place it is written. CMakeLists.txt reads it for project(VERSION).
#define GECD_VERSION_STRING "0.1.0"

#endif  // GECD_VERSION_H_
